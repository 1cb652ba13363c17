"""What the agent reports and watches beside its own work: events, timers, progress, health.

Every part is off unless the spec enables it, and the modules behind a part are imported only
when it is enabled, so a default run loads nothing from here but this file:

* events (``spec.events`` not ``null``): one ``agent.step`` record per step of the core (see
  ``tpelastic.adapters.sinks.agent_trace``) and one rendezvous event per outcome the agent sees.
* timers (``spec.timers``): a named-pipe ``FileTimerServer``; workers get ``TPELASTIC_TIMER_FILE``.
* progress (``spec.stall_timeout`` or ``spec.health_port``): workers get
  ``TPELASTIC_PROGRESS_FILE``; with a stall timeout a worker idle that long is reported stuck.
* health (``spec.health_port``): ``GET /health`` on ``spec.health_host`` with a live snapshot,
  and ``GET /metrics`` from the Prometheus handler the process routes group ``tpelastic`` to.

Threads: the agent's own thread calls everything here except :meth:`Observers.snapshot` (the
health server's thread) and the timer callback (the timer server's thread); both only touch
state under ``_lock``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tpelastic.adapters.agent.spec import WorkerSpec
from tpelastic.core import agent as core

if TYPE_CHECKING:
    from tpelastic.adapters.sinks.events import EventHandler

log = logging.getLogger("tpelastic.agent")  # report.log's logger, without importing report
PROGRESS_FILE_ENV = "TPELASTIC_PROGRESS_FILE"  # the same names progress.py and timer/api.py read
TIMER_FILE_ENV = "TPELASTIC_TIMER_FILE"
_TIMER_INTERVAL = 0.5  # a late worker is killed at most about this long after its deadline
_EXPIRY_GRACE = 0.5  # how long a SIGKILLed worker's failure waits for the timer's own report
_READ_EVERY = 0.2  # progress files are read at most this often
# Starting a worker (imports, process group, data) takes longer than a step; unless told
# otherwise the agent allows at least this long for the first step.
FIRST_STEP_DEFAULT = 60.0


class Observers:
    """The agent's optional observers for one run; :meth:`start` then :meth:`close` once.

    Args:
        spec: the agent's spec (what is enabled).
        config: the agent machine's config (recorded with every step).
        run_id: returns the job's run id (for rendezvous events and the health snapshot).
        state: returns the agent's current state (read by the health snapshot).
    """

    def __init__(
        self,
        spec: WorkerSpec,
        config: core.AgentConfig,
        run_id: Callable[[], str],
        state: Callable[[], core.AgentState],
    ) -> None:
        self._spec, self._config, self._run_id, self._state = spec, config, run_id, state
        self.agent_id = f"{os.uname().nodename}:{os.getpid()}"
        self._events: EventHandler | None = None
        if spec.events != "null":  # the sink module is imported only when events are on
            from tpelastic.adapters.sinks.events import get_event_handler

            self._events = get_event_handler(spec.events)
        self._seq = 0
        self._lock = threading.Condition()
        self._dir: str | None = None
        self._timer: Any = None
        self._expired: dict[int, Any] = {}  # pid -> ExpiredTimer, filled by the timer thread
        self._health: Any = None
        self._watch: Any = None
        self._progress_files: dict[int, str] = {}
        self._live: tuple[int, ...] = ()
        self._next_read = 0.0

    @property
    def watches_progress(self) -> bool:
        return self._spec.stall_timeout is not None or self._spec.health_port is not None

    def start(self) -> None:
        """Start the timer server and the health endpoint when enabled.

        Raises:
            OSError: the health port cannot be bound, or the run folder cannot be made.
        """
        if self._events is not None:
            from tpelastic.adapters.rendezvous import driver

            driver.set_step_recorder(self._join_stepped)
        if self._spec.timers or self.watches_progress:
            import tempfile

            self._dir = tempfile.mkdtemp(prefix="tpelastic-agent-")
        if self._spec.timers:
            from tpelastic.adapters.timer.file_based import FileTimerServer

            assert self._dir is not None
            path = os.path.join(self._dir, "timer.fifo")
            self._timer = FileTimerServer(
                path, max_interval=_TIMER_INTERVAL, on_expired=self._on_expired
            )
            self._timer.start()
        if self._spec.health_port is not None:
            from tpelastic.adapters.health import HealthServer

            port, host = self._spec.health_port, self._spec.health_host
            try:
                self._health = HealthServer(
                    self.snapshot, port=port, host=host, metrics=routed_metrics
                )
            except OSError as error:
                raise OSError(
                    f"health endpoint: cannot listen on {host}:{port}: {error.strerror}"
                ) from None
            log.info("health endpoint at %s", self._health.url)

    def close(self) -> None:
        """Stop the servers and remove the run folder; idempotent, never raises."""
        if self._events is not None:
            from tpelastic.adapters.rendezvous import driver

            previous = driver.set_step_recorder(None)
            if previous is not None and previous != self._join_stepped:
                driver.set_step_recorder(previous)  # another agent's: leave it in place
        for server, stop in ((self._timer, "stop"), (self._health, "close")):
            if server is not None:
                try:
                    getattr(server, stop)()
                except Exception:  # closing must not hide how the run ended
                    pass
        self._timer = self._health = None
        if self._dir is not None:
            import shutil

            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    # -- events ---------------------------------------------------------------------------------

    def stepped(self, before: core.AgentState, observation: object, result: Any) -> None:
        """Record one step of the core as an ``agent.step`` event (when events are on).

        A step that changes nothing and orders nothing (nodes waiting while the world is full,
        seen at every look) is not recorded: it would repeat every 0.25 s, and leaving it out
        changes no replay.
        """
        if self._events is None or (result.state == before and not result.effects):
            return
        from tpelastic.adapters.sinks.agent_trace import step_event

        event = step_event(
            agent=self.agent_id,
            seq=self._seq,
            config=self._config,
            before=before,
            observation=observation,
            result=result,
            now_wall=time.time(),
        )
        self._seq += 1
        self._events.handle(event)

    def _join_stepped(self, **step: Any) -> None:
        """Record one step of the rendezvous join machine as an ``rdzv.step`` event."""
        if self._events is None:
            return
        from tpelastic.adapters.sinks.join_trace import step_event

        self._events.handle(step_event(now_wall=time.time(), **step))

    def rendezvous(
        self,
        name: str,
        state: str,
        message: str = "",
        *,
        round_no: int | None = None,
        rank: int | None = None,
    ) -> None:
        """Record a rendezvous outcome (``rdzv.<name>``); round and rank default to the agent's.

        ``state`` is a ``NodeState`` or its name (``"RUNNING"``): callers pass the name so that
        a run without events never imports the sink module.

        Raises:
            ValueError: ``state`` names no ``NodeState`` (only checked when events are on).
        """
        if self._events is None:
            return
        from tpelastic.adapters.sinks.events import NodeState, RdzvEvent

        now = self._state()
        round_no = now.round if round_no is None else round_no
        rank = now.group_rank if rank is None else rank
        self._events.handle(
            RdzvEvent(
                name=f"rdzv.{name}",
                run_id=self._run_id(),
                round=round_no,
                node=self.agent_id,
                state=NodeState(state),
                rank=rank if rank >= 0 else None,
                message=message,
                timestamp=time.time(),
            )
        )

    # -- workers: environment, timers, progress -------------------------------------------------

    def worker_envs(
        self, envs: dict[int, dict[str, str]], round_no: int, now: float
    ) -> dict[int, dict[str, str]]:
        """``envs`` with the timer and progress variables added; starts watching progress."""
        added: dict[int, dict[str, str]] = {rank: {} for rank in envs}
        if self._timer is not None:
            for extra in added.values():
                extra[TIMER_FILE_ENV] = self._timer.path
        if self.watches_progress:
            assert self._dir is not None
            self._new_watch(round_no, sorted(envs), now)
            for rank, extra in added.items():
                extra[PROGRESS_FILE_ENV] = self._progress_files[rank]
        return {rank: {**env, **added[rank]} for rank, env in envs.items()}

    def _new_watch(self, round_no: int, ranks: list[int], now: float) -> None:
        from tpelastic.adapters.progress import ProgressWatch

        assert self._dir is not None
        for old in self._progress_files.values():
            try:
                os.unlink(old)
            except OSError:
                pass
        timeout = self._spec.stall_timeout or float("inf")  # health only: never stuck
        first = self._spec.stall_first_step_timeout or max(timeout, FIRST_STEP_DEFAULT)
        with self._lock:
            self._progress_files = {
                r: os.path.join(self._dir, f"progress_r{round_no}_{r}") for r in ranks
            }
            self._watch = ProgressWatch(ranks, now, idle_timeout=timeout, first_step_timeout=first)
            self._live = tuple(ranks)

    def workers_stopped(self, pids: set[int]) -> None:
        """The attempt is over: stop watching its progress and drop its workers' timers."""
        if self._timer is not None:
            self._timer.forget_workers(pids)
        with self._lock:
            self._live = ()
            for pid in pids:
                self._expired.pop(pid, None)

    def stuck(self, now: float, live_ranks: Callable[[], tuple[int, ...]]) -> Any | None:
        """The first ``Stall`` among the live local ranks, or None (also when not watching).

        ``live_ranks()`` (asked only when the files are due to be read) says which local ranks'
        processes still run: a worker that has ended is never stuck.
        """
        if self._watch is None or now < self._next_read:
            return None
        from tpelastic.adapters.agent import publish

        self._next_read = now + _READ_EVERY
        live = live_ranks()
        with self._lock:
            self._live = live
            self._read_all(now)
            samples = self._watch.samples()
            stalls = [s for s in self._watch.stalled(now) if s.rank in live]
        first = self._state().group_rank * self._spec.local_world_size
        for rank, sample in samples.items():
            if sample is not None and sample.counter > 0:
                publish.rank_progress(first + rank, sample.counter, sample.step_seconds)
        if self._spec.stall_timeout is None:
            return None
        return stalls[0] if stalls else None

    def _on_expired(self, expired: Any) -> None:
        with self._lock:
            self._expired[expired.worker_id] = expired
            self._lock.notify_all()

    def timer_reason(self, pid: int, signal_name: str | None) -> str | None:
        """Why worker ``pid`` died if its timer killed it, else None.

        A worker killed by the timer's signal may be seen dead before the timer thread reports
        it, so that case waits up to half a second for the report.
        """
        if self._timer is None:
            return None
        import signal

        killed_by_timer_signal = signal_name == signal.Signals(self._timer.kill_signal).name
        with self._lock:
            if killed_by_timer_signal:
                self._lock.wait_for(lambda: pid in self._expired, timeout=_EXPIRY_GRACE)
            expired = self._expired.pop(pid, None)
        if expired is None:
            return None
        scopes = ", ".join(expired.scopes)
        return f"timer expired (scope {scopes}): killed with {signal_name or 'a signal'}"

    # -- health ---------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """What ``GET /health`` answers: the agent's state and each worker's progress age."""
        state = self._state()
        now = time.monotonic()
        with self._lock:
            ages: dict[str, float | None] = {}
            if self._watch is not None:
                if self._spec.stall_timeout is None:  # nobody else reads the files then
                    self._read_all(now)
                found = self._watch.last_progress_age(now)
                ages = {str(r): round(found[r], 3) if r in self._live else None for r in found}
        return {
            "state": state.phase.name,
            "round": state.round,
            "restart_count": state.restart_count,
            "attempt": state.attempt,
            "max_restarts": self._spec.max_restarts,
            "group_rank": state.group_rank,
            "group_world_size": state.group_world_size,
            "local_world_size": self._spec.local_world_size,
            "last_progress_age_s": ages,
            "run_id": self._run_id(),
            "pid": os.getpid(),
        }

    def _read_all(self, now: float) -> None:
        from tpelastic.adapters.progress import read_progress

        for rank, path in self._progress_files.items():
            self._watch.observe(rank, read_progress(path), now)


def routed_metrics() -> tuple[str, bytes] | None:
    """The Prometheus text of the handler group ``tpelastic`` is routed to, if it has one."""
    import sys

    metrics = sys.modules.get("tpelastic.adapters.sinks.metrics")
    if metrics is None:  # never imported: nothing routes metrics anywhere
        return None
    handler = metrics.DEFAULT_ROUTER.handler_for(metrics.DEFAULT_GROUP)
    exposition = getattr(handler, "exposition", None)
    return None if exposition is None else exposition()


def describe_stall(stall: Any, global_rank: int) -> str:
    """``local rank 1 (rank 3) is stuck: no progress for 30.2 s (last step 812)``."""
    last = "no step yet" if stall.counter in (None, 0) else f"last step {stall.counter}"
    why = ", waiting in a collective" if stall.waiting else ""
    return (
        f"local rank {stall.rank} (rank {global_rank}) is stuck: "
        f"no progress for {stall.idle_for:.1f} s ({last}{why})"
    )


__all__ = ["PROGRESS_FILE_ENV", "TIMER_FILE_ENV", "Observers", "describe_stall"]
