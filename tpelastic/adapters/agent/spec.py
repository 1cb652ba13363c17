"""Values of the agent: what to run (``WorkerSpec``) and how it ended (``RunResult``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from attrs import Factory, field, frozen, validators

from tpelastic.adapters.workers.api import ProcessFailure, Std
from tpelastic.core.values import value_eq, value_hash, value_repr
from tpelastic.core.worker_values import WorkerState

DEFAULT_EXIT_BARRIER_TIMEOUT = 300.0


def _positive(_instance: object, attribute: Any, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value!r}")


def _port_or_none(_instance: object, attribute: Any, value: int | None) -> None:
    if value is not None and not 0 < value <= 65535:
        raise ValueError(f"{attribute.name} must be in 1..65535, got {value!r}")


@frozen(eq=False)
class WorkerSpec:
    """What one agent runs: the same spec on every node of a role.

    The positional fields, their order and defaults are torch 2.13's ``WorkerSpec``; the fields
    after ``virtual_local_rank`` are ours and keyword-only.

    Attributes:
        role: the role name (``ROLE_NAME``; prefixes teed output).
        local_world_size: workers on this node.
        rdzv_handler: the rendezvous handler that forms the world.
        fn: a callable entrypoint (torch's older name; ``entrypoint`` wins when both are given).
        entrypoint: a command (``sys.executable`` for scripts) or a callable.
        args: the entrypoint's arguments.
        max_restarts: job-wide restarts after worker failures (``max_restarts + 1`` attempts).
        monitor_interval: seconds between membership checks while workers run (worker exits
            are seen at once, not on this interval).
        master_port, master_addr: when given, every attempt uses exactly these for the
            workers' bootstrap store; otherwise rank 0 publishes a fresh free port per round.
        local_addr: this node's address as peers should reach it.
        event_log_handler: the event destination (``null``, ``console``, ``logging``,
            ``jsonl:<path>``).
        numa_options: torch's NUMA binding of GPU workers; accepted, nothing to bind on CPUs.
        duplicate_stdout_filters, duplicate_stderr_filters: worker lines to copy to the
            agent's own streams.
        virtual_local_rank: every worker sees ``LOCAL_RANK=0``.
        min_nodes, max_nodes: the world bounds the rendezvous enforces (checked again here).
        start_method: ``spawn``/``fork``/``forkserver`` for callables.
        redirects, tee, log_dir: where worker output goes (see docs/processes.md).
        exit_barrier_timeout: how long a finished node waits for the rest of the world.
        close_timeout: grace (seconds) between the death signal and SIGKILL when stopping, on
            every stop path (restart, scale, signal, end); 0 is SIGKILL at once.
        timers: run a named-pipe timer server; workers get ``TPELASTIC_TIMER_FILE`` so
            ``tpelastic.timer.expires`` works in them with no setup.
        stall_timeout: seconds without a ``progress.step()`` after which a worker counts as
            stuck (a hang: restart within budget, else fail); None (the default) is off.
        stall_first_step_timeout: the same before a worker's first step (startup, loading);
            None means ``max(stall_timeout, 60)``.
        health_port: serve ``GET /health`` (JSON) at this port; None is off. ``/metrics`` is
            served there too when group ``tpelastic`` is routed to a Prometheus handler.
        health_host: the address the health endpoint binds (loopback unless you mean to
            expose it; ``0.0.0.0`` is every address).
        local_ranks_filter: only these local ranks' output reaches the console; None is all.
        signals_to_handle: the signals that stop the agent and its workers (torchrun's
            ``--signals-to-handle``); SIGUSR1 and SIGUSR2 are forwarded unless named.
        warm_workers: start command workers of a Python script or module from pre-started
            interpreters that have already imported tensorplay (``workers/warm.py``); False
            (or ``TPELASTIC_WARM_WORKERS=0``) starts every worker afresh.
        metrics: the ``MetricsRouter`` the agent publishes its metrics to (the launcher builds
            one per run); None: the process's routing of torch's ``metrics.configure``.
    """

    __repr__ = value_repr

    role: str = field(validator=validators.min_len(1))
    local_world_size: int = field(validator=validators.ge(1))
    rdzv_handler: Any
    fn: Callable[..., Any] | None = None
    entrypoint: str | Callable[..., Any] | None = None
    args: tuple[Any, ...] = ()
    max_restarts: int = field(default=3, validator=validators.ge(0))
    monitor_interval: float = field(default=0.1, validator=_positive)
    master_port: int | None = field(default=None, validator=_port_or_none)
    master_addr: str | None = None
    local_addr: str | None = None
    event_log_handler: str = "null"
    numa_options: Any = None
    duplicate_stdout_filters: list[str] | None = None
    duplicate_stderr_filters: list[str] | None = None
    virtual_local_rank: bool = False
    min_nodes: int = field(default=1, validator=validators.ge(1), kw_only=True)
    max_nodes: int = field(default=1, validator=validators.ge(1), kw_only=True)
    start_method: str = field(default="spawn", kw_only=True)
    redirects: Std | int | str | dict[int, Std] = field(default=Std.NONE, kw_only=True)
    tee: Std | int | str | dict[int, Std] = field(default=Std.NONE, kw_only=True)
    log_dir: str | None = field(default=None, kw_only=True)
    exit_barrier_timeout: float = field(
        default=DEFAULT_EXIT_BARRIER_TIMEOUT, validator=_positive, kw_only=True
    )
    close_timeout: float = field(default=30.0, validator=validators.ge(0), kw_only=True)
    timers: bool = field(default=False, kw_only=True)
    stall_timeout: float | None = field(
        default=None, validator=validators.optional(_positive), kw_only=True
    )
    stall_first_step_timeout: float | None = field(
        default=None, validator=validators.optional(_positive), kw_only=True
    )
    health_port: int | None = field(default=None, validator=_port_or_none, kw_only=True)
    health_host: str = field(default="127.0.0.1", kw_only=True)
    local_ranks_filter: frozenset[int] | None = field(default=None, kw_only=True)
    signals_to_handle: str = field(default="SIGTERM,SIGINT,SIGHUP,SIGQUIT", kw_only=True)
    warm_workers: bool = field(default=True, kw_only=True)
    metrics: Any = field(default=None, kw_only=True, eq=False)

    @property
    def events(self) -> str:
        """``event_log_handler``: where agent events go."""
        return self.event_log_handler

    def __attrs_post_init__(self) -> None:
        if self.max_nodes < self.min_nodes:
            raise ValueError(
                f"max_nodes ({self.max_nodes}) must be >= min_nodes ({self.min_nodes})"
            )
        if self.entrypoint is None and self.fn is None:
            raise ValueError("WorkerSpec needs an entrypoint (a command or a callable)")

    @property
    def target(self) -> str | Callable[..., Any]:
        """The entrypoint to start: ``entrypoint`` when given, else ``fn``."""
        chosen = self.entrypoint if self.entrypoint is not None else self.fn
        assert chosen is not None  # checked in __attrs_post_init__
        return chosen

    def get_entrypoint_name(self) -> str:
        """A short name for summaries: the script's or function's name, else the command."""
        target = self.target
        if callable(target):
            return getattr(target, "__qualname__", repr(target))
        if target == sys.executable:
            # python [options] script.py ...: the script names the job better than python does.
            script = next((str(a) for a in self.args if not str(a).startswith("-")), None)
            return script or target
        return target


def _default_exit_code(result: RunResult) -> int:
    return 0 if result.state is WorkerState.SUCCEEDED else 1


@frozen
class RunResult:
    """How an agent's run ended (torch's fields first; ours keyword-only).

    Attributes:
        state: ``SUCCEEDED`` or ``FAILED``.
        return_values: per global rank, a callable's return value (callables only).
        failures: per global rank, how workers of the last attempt failed.
        exit_code: the launcher's exit status (0, 1, 3, or 128 + signum; see docs/launcher.md);
            by default 0 for ``SUCCEEDED`` and 1 otherwise.
        reason: why it failed ("" on success).
        restart_count: the job-wide restarts used by the last round this node took part in.
        round: the last rendezvous round this node took part in (-1 if none).
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    state: WorkerState
    return_values: dict[int, Any] = field(factory=dict)
    failures: dict[int, ProcessFailure] = field(factory=dict)
    exit_code: int = field(default=Factory(_default_exit_code, takes_self=True), kw_only=True)
    reason: str = field(default="", kw_only=True)
    restart_count: int = field(default=0, kw_only=True)
    round: int = field(default=-1, kw_only=True)

    def is_failed(self) -> bool:
        """True when the run did not succeed."""
        return self.state is not WorkerState.SUCCEEDED
