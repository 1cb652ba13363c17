"""Values of the agent: what to run (``WorkerSpec``) and how it ended (``RunResult``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from attrs import field, frozen, validators

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


@frozen(kw_only=True, eq=False)
class WorkerSpec:
    """What one agent runs: the same spec on every node of a role.

    Attributes:
        role: the role name (``ROLE_NAME``; prefixes teed output).
        local_world_size: workers on this node.
        rdzv_handler: the rendezvous handler that forms the world.
        entrypoint: a command (``sys.executable`` for scripts) or a callable.
        args: the entrypoint's arguments.
        fn: a callable entrypoint (an alias of ``entrypoint`` kept for the reference API).
        max_restarts: job-wide restarts after worker failures (``max_restarts + 1`` attempts).
        monitor_interval: seconds between membership checks while workers run (worker exits
            are seen at once, not on this interval).
        min_nodes, max_nodes: the world bounds the rendezvous enforces (checked again here).
        master_addr, master_port: when given, every attempt uses exactly these for the
            workers' bootstrap store; otherwise rank 0 publishes a fresh free port per round.
        local_addr: this node's address as peers should reach it.
        start_method: ``spawn``/``fork``/``forkserver`` for callables.
        redirects, tee, log_dir: where worker output goes (see docs/processes.md).
        exit_barrier_timeout: how long a finished node waits for the rest of the world.
        close_timeout: grace (seconds) between the death signal and SIGKILL when stopping, on
            every stop path (restart, scale, signal, end); 0 is SIGKILL at once.
        events: the event destination (``null``, ``console``, ``logging``, ``jsonl:<path>``).
        timers: run a named-pipe timer server; workers get ``TPELASTIC_TIMER_FILE`` so
            ``tpelastic.timer.expires`` works in them with no setup.
        stall_timeout: seconds without a ``progress.step()`` after which a worker counts as
            stuck (a hang: restart within budget, else fail); None (the default) is off.
        stall_first_step_timeout: the same before a worker's first step (startup, loading);
            None means ``max(stall_timeout, 60)``.
        health_port: serve ``GET /health`` (JSON) at this port; None is off. ``/metrics`` is
            served there too when the process routes group ``tpelastic`` to a Prometheus handler.
        health_host: the address the health endpoint binds (loopback unless you mean to
            expose it; ``0.0.0.0`` is every address).
        local_ranks_filter: only these local ranks' output reaches the console; None is all.
        numa_options, duplicate_stdout_filters, duplicate_stderr_filters, virtual_local_rank:
            as :class:`tpelastic.launcher.LaunchConfig`'s.
        signals_to_handle: the signals that stop the agent and its workers (torchrun's
            ``--signals-to-handle``); SIGUSR1 and SIGUSR2 are forwarded unless named.
    """

    __repr__ = value_repr

    role: str = field(default="default", validator=validators.min_len(1))
    local_world_size: int = field(validator=validators.ge(1))
    rdzv_handler: Any
    entrypoint: str | Callable[..., Any] | None = None
    args: tuple[Any, ...] = ()
    fn: Callable[..., Any] | None = None
    max_restarts: int = field(default=3, validator=validators.ge(0))
    monitor_interval: float = field(default=0.1, validator=_positive)
    min_nodes: int = field(default=1, validator=validators.ge(1))
    max_nodes: int = field(default=1, validator=validators.ge(1))
    master_addr: str | None = None
    master_port: int | None = field(default=None, validator=_port_or_none)
    local_addr: str | None = None
    start_method: str = "spawn"
    redirects: Std | int | str | dict[int, Std] = Std.NONE
    tee: Std | int | str | dict[int, Std] = Std.NONE
    log_dir: str | None = None
    exit_barrier_timeout: float = field(default=DEFAULT_EXIT_BARRIER_TIMEOUT, validator=_positive)
    close_timeout: float = field(default=30.0, validator=validators.ge(0))
    events: str = "null"
    timers: bool = False
    stall_timeout: float | None = field(default=None, validator=validators.optional(_positive))
    stall_first_step_timeout: float | None = field(
        default=None, validator=validators.optional(_positive)
    )
    health_port: int | None = field(default=None, validator=_port_or_none)
    health_host: str = "127.0.0.1"
    local_ranks_filter: frozenset[int] | None = None
    numa_options: str | None = None
    duplicate_stdout_filters: list[str] | None = None
    duplicate_stderr_filters: list[str] | None = None
    virtual_local_rank: bool = False
    signals_to_handle: str = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"

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


@frozen(kw_only=True)
class RunResult:
    """How an agent's run ended.

    Attributes:
        state: ``SUCCEEDED`` or ``FAILED``.
        exit_code: the launcher's exit status (0, 1, 3, or 128 + signum; see docs/launcher.md).
        reason: why it failed ("" on success).
        return_values: per global rank, a callable's return value (callables only).
        failures: per global rank, how workers of the last attempt failed.
        restart_count: the job-wide restarts used by the last round this node took part in.
        round: the last rendezvous round this node took part in (-1 if none).
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    state: WorkerState
    exit_code: int
    reason: str = ""
    return_values: dict[int, Any] = field(factory=dict)
    failures: dict[int, ProcessFailure] = field(factory=dict)
    restart_count: int = 0
    round: int = -1

    def is_failed(self) -> bool:
        """True when the run did not succeed."""
        return self.state is not WorkerState.SUCCEEDED
