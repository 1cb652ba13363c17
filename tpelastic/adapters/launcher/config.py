"""LaunchConfig: everything one ``tpelastic run`` needs, checked when it is built."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attrs import field, frozen, validators

from tpelastic.adapters.rendezvous.parameters import MAX_SECONDS, parse_endpoint
from tpelastic.adapters.workers.api import Std
from tpelastic.core.values import value_eq, value_hash, value_repr

if TYPE_CHECKING:
    from tpelastic.adapters.workers.logs import LogsSpecs

START_METHODS = ("spawn", "fork", "forkserver")
DEFAULT_ROLE = "default_role"


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


def _seconds_or_unset(_instance: object, attribute: Any, value: object) -> None:
    # torch's -1 (and None) leave the setting to the rendezvous configuration.
    if value is None or value == -1:
        return
    _seconds(_instance, attribute, value)


@frozen
class LaunchConfig:
    """How to launch one node's agent (the same on every node, but for addresses and rank).

    The positional fields, their order and their defaults are torch 2.13's ``LaunchConfig``;
    the fields after ``shutdown_timeout`` are ours and keyword-only.

    Attributes:
        min_nodes, max_nodes: the world's bounds (``--nnodes MIN:MAX``).
        nproc_per_node: workers on each node.
        logs_specs: where worker output goes, as a :class:`~tpelastic.multiprocessing.LogsSpecs`;
            when given it overrides ``log_dir``, ``redirects`` and ``tee``.
        run_id: the job's id; every node of a job uses the same one. Empty (the default, as
            torch's) draws a random one at launch.
        role: the workers' role name.
        rdzv_endpoint: ``host[:port]`` of the rendezvous store.
        rdzv_backend: ``etcd`` (torch's default), ``static``, ``tcp`` (aliases ``c10d``,
            ``p10d``), ``file``, or a plugin.
        rdzv_configs: backend options (``--rdzv-conf``), e.g. ``join_timeout``.
        rdzv_timeout: seconds; the join timeout (overrides ``join_timeout``); -1 leaves it.
        max_restarts: job-wide restarts after worker failures.
        monitor_interval: seconds between membership checks while workers run.
        start_method: for callables: ``spawn``, ``fork`` or ``forkserver``.
        log_line_prefix_template: the prefix of teed lines (``${role_name}``, ``${rank}``,
            ``${local_rank}``); None is ours (``[role<rank>]:``).
        metrics_cfg: metric group -> handler name (``console``, ``logging``, ``null``).
        local_addr: this node's address as peers should reach it.
        event_log_handler: where agent events go (``null``, ``console``, ``logging``,
            ``jsonl:<path>``).
        numa_options: torchrun's ``--numa-binding`` mode; binding applies to GPU workers only.
        signals_to_handle: the signals that stop the agent and its workers (comma-separated
            names, as torchrun's ``--signals-to-handle``).
        warm_workers: start Python workers from pre-started interpreters that have already
            imported tensorplay (see docs/processes.md); False starts each one afresh.
        duplicate_stdout_filters, duplicate_stderr_filters: lines of the teed streams that
            hold any of these texts are also copied to ``filtered_stdout.log`` /
            ``filtered_stderr.log`` in the attempt's log folder.
        virtual_local_rank: every worker sees ``LOCAL_RANK=0`` (with its own device first in
            ``CUDA_VISIBLE_DEVICES``).
        shutdown_timeout: seconds a stopped worker has between the stop signal and SIGKILL, on
            every stop path; None reads ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``, else 10.
        log_dir, redirects, tee: where worker output goes (when ``logs_specs`` is None).
        master_addr, master_port: a fixed bootstrap endpoint for the workers (else a fresh one
            per round).
        exit_barrier_timeout: how long a finished node waits for the others.
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
        local_ranks_filter: only these local ranks' output reaches the console; None is all.

    Raises:
        ConfigError: on any bad value, naming the setting.
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    min_nodes: int = field(validator=_int_at_least(1))
    max_nodes: int = field(validator=_int_at_least(1))
    nproc_per_node: int = field(validator=_int_at_least(1))
    logs_specs: LogsSpecs | None = None
    run_id: str = ""
    role: str = DEFAULT_ROLE
    rdzv_endpoint: str = ""
    rdzv_backend: str = "etcd"
    rdzv_configs: dict[str, Any] = field(factory=dict)
    rdzv_timeout: float | None = field(default=-1, validator=_seconds_or_unset)
    max_restarts: int = field(default=3, validator=_int_at_least(0))
    monitor_interval: float = field(default=0.1, validator=_seconds)
    start_method: str = field(default="spawn", validator=_start_method)
    log_line_prefix_template: str | None = None
    metrics_cfg: dict[str, str] = field(factory=dict)
    local_addr: str | None = None
    event_log_handler: str = field(default="null", validator=validators.instance_of(str))
    numa_options: Any = None
    signals_to_handle: str = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
    duplicate_stdout_filters: list[str] | None = None
    duplicate_stderr_filters: list[str] | None = None
    virtual_local_rank: bool = False
    shutdown_timeout: float | None = None
    log_dir: str | None = field(default=None, kw_only=True)
    redirects: Std | int | str | dict[int, Std] = field(default=Std.NONE, kw_only=True)
    tee: Std | int | str | dict[int, Std] = field(default=Std.NONE, kw_only=True)
    master_addr: str | None = field(default=None, kw_only=True)
    master_port: int | None = field(default=None, validator=_port, kw_only=True)
    exit_barrier_timeout: float = field(default=300.0, validator=_seconds, kw_only=True)
    standalone: bool = field(default=False, kw_only=True)
    metrics_port: int | None = field(default=None, validator=_port, kw_only=True)
    timers: bool = field(default=False, kw_only=True)
    stall_timeout: float | None = field(default=None, kw_only=True)
    stall_first_step_timeout: float | None = field(default=None, kw_only=True)
    health_port: int | None = field(default=None, validator=_port, kw_only=True)
    metrics_host: str = field(default="127.0.0.1", kw_only=True)
    health_host: str = field(default="127.0.0.1", kw_only=True)
    local_ranks_filter: frozenset[int] | None = field(default=None, kw_only=True)
    warm_workers: bool = field(default=True, kw_only=True)

    @property
    def events(self) -> str:
        """``event_log_handler``: where agent events go."""
        return self.event_log_handler

    def __attrs_post_init__(self) -> None:
        if self.max_nodes < self.min_nodes:
            raise ConfigError(
                f"--nnodes {self.min_nodes}:{self.max_nodes}: MIN must not be greater than MAX"
            )
        for name in ("role", "rdzv_backend"):
            if not str(getattr(self, name)).strip():
                raise ConfigError(f"{name} must not be empty")
        named = self.events in ("null", "console", "logging")
        if not named and not (self.events.startswith("jsonl:") and len(self.events) > 6):
            raise ConfigError(
                "event_log_handler must be null, console, logging or jsonl:<path>, "
                f"got {self.events!r}"
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
        for optional in ("stall_timeout", "stall_first_step_timeout"):
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
        if self.rdzv_timeout is not None and self.rdzv_timeout != -1:
            options["join_timeout"] = self.rdzv_timeout
        return options


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name


__all__ = ["DEFAULT_ROLE", "MAX_SECONDS", "START_METHODS", "ConfigError", "LaunchConfig"]
