"""LaunchConfig: everything one ``tpelastic run`` needs, checked when it is built."""

from __future__ import annotations

from typing import Any

from attrs import field, frozen, validators

from tpelastic.adapters.rendezvous.parameters import MAX_SECONDS, parse_endpoint
from tpelastic.adapters.workers.api import Std
from tpelastic.core.values import value_eq, value_hash, value_repr

START_METHODS = ("spawn", "fork", "forkserver")


class ConfigError(ValueError):
    """A launch setting is wrong; the message is one line naming the setting and the value."""


def _int_at_least(low: int) -> Any:
    def check(_instance: object, attribute: Any, value: object) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ConfigError(f"{attribute.name} must be an integer >= {low}, got {value!r}")

    return check


def _seconds(_instance: object, attribute: Any, value: object) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not 0 < float(value) <= MAX_SECONDS:  # type: ignore[arg-type]
        raise ConfigError(
            f"{attribute.name} must be a positive number of seconds up to {MAX_SECONDS:g}, "
            f"got {value!r}"
        )


def _port(_instance: object, attribute: Any, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= 65535:
        raise ConfigError(f"{attribute.name} must be a port number in 1..65535, got {value!r}")


def _start_method(_instance: object, _attribute: object, value: str) -> None:
    if value not in START_METHODS:
        raise ConfigError(f"start_method must be one of {', '.join(START_METHODS)}, got {value!r}")


@frozen(kw_only=True)
class LaunchConfig:
    """How to launch one node's agent (the same on every node, but for addresses and rank).

    Attributes:
        min_nodes, max_nodes: the world's bounds (``--nnodes MIN:MAX``).
        nproc_per_node: workers on each node.
        run_id: the job's id; every node of a job uses the same one.
        role: the workers' role name.
        rdzv_endpoint: ``host[:port]`` of the rendezvous store.
        rdzv_backend: ``static``, ``tcp`` (aliases ``c10d``, ``p10d``), ``file``, or a plugin.
        rdzv_configs: backend options (``--rdzv-conf``), e.g. ``join_timeout``.
        rdzv_timeout: when given, the join timeout in seconds (overrides ``join_timeout``).
        max_restarts: job-wide restarts after worker failures.
        monitor_interval: seconds between membership checks while workers run.
        start_method: for callables: ``spawn``, ``fork`` or ``forkserver``.
        log_dir, redirects, tee: where worker output goes.
        local_addr: this node's address as peers should reach it.
        master_addr, master_port: a fixed bootstrap endpoint for the workers (else a fresh one
            per round).
        exit_barrier_timeout: how long a finished node waits for the others.
        metrics_cfg: metric group -> handler name (``console``, ``logging``, ``null``).
        events: where agent events go (``null``, ``console``, ``logging``, ``jsonl:<path>``).
        standalone: a job on this machine only; with ``max_nodes == 1`` the rendezvous state
            lives in the agent's memory (no store server, no tensorplay import in the agent).
        metrics_port: serve the agent's metrics for Prometheus at this port, on
            ``metrics_host`` (needs the ``tpelastic[prometheus]`` extra); None is off. Unless
            ``health_port`` names another endpoint, ``/health`` is served there too.
        metrics_host: the address the metrics endpoint binds (``0.0.0.0``: every address).
        timers: run a timer server so ``tpelastic.timer.expires`` works in the workers.
        stall_timeout: seconds without a ``progress.step()`` after which a worker is stuck
            (restart within budget, else fail); None is off.
        stall_first_step_timeout: the same before a worker's first step; None means
            ``max(stall_timeout, 60)``.
        health_port: serve ``GET /health`` (JSON) at this port, on ``health_host``; None is
            off. The same host and port as the metrics endpoint serves both from one.
        health_host: the address the health endpoint binds.
        shutdown_timeout: seconds a stopped worker has between the stop signal and SIGKILL, on
            every stop path; None reads ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``, else 10.
        signals_to_handle: the signals that stop the agent and its workers (comma-separated
            names, as torchrun's ``--signals-to-handle``).
        local_ranks_filter: only these local ranks' output reaches the console; None is all.
        duplicate_stdout_filters, duplicate_stderr_filters: lines of the teed streams that
            hold any of these texts are also copied to ``filtered_stdout.log`` /
            ``filtered_stderr.log`` in the attempt's log folder.
        virtual_local_rank: every worker sees ``LOCAL_RANK=0`` (with its own device first in
            ``CUDA_VISIBLE_DEVICES``).
        numa_options: torchrun's ``--numa-binding`` mode; binding applies to GPU workers only.

    Raises:
        ConfigError: on any bad value, naming the setting.
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    min_nodes: int = field(validator=_int_at_least(1))
    max_nodes: int = field(validator=_int_at_least(1))
    nproc_per_node: int = field(validator=_int_at_least(1))
    run_id: str = "none"
    role: str = "default"
    rdzv_endpoint: str = ""
    rdzv_backend: str = "static"
    rdzv_configs: dict[str, Any] = field(factory=dict)
    rdzv_timeout: float | None = None
    max_restarts: int = field(default=0, validator=_int_at_least(0))
    monitor_interval: float = field(default=0.1, validator=_seconds)
    start_method: str = field(default="spawn", validator=_start_method)
    log_dir: str | None = None
    redirects: Std | int | str | dict[int, Std] = Std.NONE
    tee: Std | int | str | dict[int, Std] = Std.NONE
    local_addr: str | None = None
    master_addr: str | None = None
    master_port: int | None = field(default=None, validator=_port)
    exit_barrier_timeout: float = field(default=300.0, validator=_seconds)
    metrics_cfg: dict[str, str] = field(factory=dict)
    events: str = field(default="null", validator=validators.instance_of(str))
    standalone: bool = False
    metrics_port: int | None = field(default=None, validator=_port)
    timers: bool = False
    stall_timeout: float | None = None
    stall_first_step_timeout: float | None = None
    health_port: int | None = field(default=None, validator=_port)
    metrics_host: str = "127.0.0.1"
    health_host: str = "127.0.0.1"
    shutdown_timeout: float | None = None
    signals_to_handle: str = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
    local_ranks_filter: frozenset[int] | None = None
    duplicate_stdout_filters: list[str] | None = None
    duplicate_stderr_filters: list[str] | None = None
    virtual_local_rank: bool = False
    numa_options: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.max_nodes < self.min_nodes:
            raise ConfigError(
                f"--nnodes {self.min_nodes}:{self.max_nodes}: MIN must not be greater than MAX"
            )
        for name in ("run_id", "role", "rdzv_backend"):
            if not str(getattr(self, name)).strip():
                raise ConfigError(f"{name} must not be empty")
        named = self.events in ("null", "console", "logging")
        if not named and not (self.events.startswith("jsonl:") and len(self.events) > 6):
            raise ConfigError(
                f"events must be null, console, logging or jsonl:<path>, got {self.events!r}"
            )
        for group, handler in self.metrics_cfg.items():
            if handler not in ("null", "console", "logging"):
                raise ConfigError(
                    f"metrics for group {group!r} must go to null, console or logging, "
                    f"got {handler!r}"
                )
        if self.shutdown_timeout is not None and not (
            isinstance(self.shutdown_timeout, (int, float))
            and not isinstance(self.shutdown_timeout, bool)
            and 0 <= self.shutdown_timeout <= MAX_SECONDS
        ):
            raise ConfigError(
                f"shutdown_timeout must be a number of seconds in 0..{MAX_SECONDS:g}, "
                f"got {self.shutdown_timeout!r}"
            )
        for optional in ("rdzv_timeout", "stall_timeout", "stall_first_step_timeout"):
            if getattr(self, optional) is not None:
                _seconds(self, _Named(optional), getattr(self, optional))
        if self.rdzv_backend != "file" and str(self.rdzv_configs.get("store_type", "")) != "file":
            try:
                parse_endpoint(self.rdzv_endpoint)
            except ValueError as error:
                raise ConfigError(str(error)) from None

    def rendezvous_config(self) -> dict[str, Any]:
        """The backend options, with ``rdzv_timeout`` folded in as ``join_timeout``."""
        options = dict(self.rdzv_configs)
        if self.rdzv_timeout is not None:
            options["join_timeout"] = self.rdzv_timeout
        return options


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name


__all__ = ["MAX_SECONDS", "START_METHODS", "ConfigError", "LaunchConfig"]
