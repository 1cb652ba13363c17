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
import re
import socket
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tpelastic.adapters.agent.spec import WorkerSpec
from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock
from tpelastic.core import agent as core

if TYPE_CHECKING:
    from tpelastic.adapters.sinks.events import EventHandler

log = logging.getLogger("tpelastic.agent")  # report.log's logger, without importing report
PROGRESS_FILE_ENV = "TPELASTIC_PROGRESS_FILE"  # the same names progress.py and timer/api.py read
TIMER_FILE_ENV = "TPELASTIC_TIMER_FILE"
COLLECTIVES_ENV = "TPELASTIC_COLLECTIVES"  # collectives.py's name
STRAGGLER_FACTOR_ENV = "TPELASTIC_STRAGGLER_FACTOR"
_TIMER_INTERVAL = 0.5  # a late worker is killed at most about this long after its deadline
_EXPIRY_GRACE = 0.5  # how long a SIGKILLed worker's failure waits for the timer's own report
_READ_EVERY = 0.2  # progress files are read at most this often
# Agents publish a status record this often (and at every change of their state); 0 is off.
STATUS_INTERVAL_ENV = "TPELASTIC_STATUS_INTERVAL"
_STATUS_EVERY = 2.0
_OPENED = re.compile(r"round (\d+) opened: (\w+)")


class Observers:
    """The agent's optional observers for one run; :meth:`start` then :meth:`close` once.

    Args:
        spec: the agent's spec (what is enabled).
        config: the agent machine's config (recorded with every step).
        run_id: returns the job's run id (for rendezvous events and the health snapshot).
        state: returns the agent's current state (read by the health snapshot).
        clock: the agent's clock (progress ages; wall time for event timestamps).
    """

    def __init__(
        self,
        spec: WorkerSpec,
        config: core.AgentConfig,
        run_id: Callable[[], str],
        state: Callable[[], core.AgentState],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._spec, self._config, self._run_id, self._state = spec, config, run_id, state
        self._clock = clock
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
        self._status: Any = None
        self._node = ""
        self._straggling: set[int] = set()  # global ranks logged as stragglers this attempt
        self._previous_round: Any = None  # the last RoundResult this node joined

    @property
    def watches_progress(self) -> bool:
        spec = self._spec
        return spec.stall_timeout is not None or spec.health_port is not None or bool(self._status)

    def start(self) -> None:
        """Start the timer server and the health endpoint when enabled.

        Raises:
            OSError: the health port cannot be bound, or the run folder cannot be made.
        """
        self._start_status()
        if self._events is not None and hasattr(self._spec.rdzv_handler, "record_join_step"):
            self._spec.rdzv_handler.record_join_step = self._join_stepped
        if self._spec.timers or self.watches_progress:
            # Not tempfile: with shutil, random and the compressors it costs a multi-node
            # agent's start a few ms (logs.make_temp_dir says the same for the log folder).
            from tpelastic.adapters.workers.logs import make_temp_dir

            self._dir = make_temp_dir("tpelastic-agent-")
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
                status = self.job_view if self._status is not None else None
                self._health = HealthServer(
                    self.snapshot, port=port, host=host, metrics=self.routed_metrics, status=status
                )
            except OSError as error:
                raise OSError(
                    f"health endpoint: cannot listen on {host}:{port}: {error.strerror}"
                ) from None
            log.info("health endpoint at %s", self._health.url)

    def routed_metrics(self) -> tuple[str, bytes] | None:
        """The Prometheus text of the handler group ``tpelastic`` is routed to, if it has one
        (by the run's router, ``WorkerSpec.metrics``, else the process's routing)."""
        metrics = sys.modules.get("tpelastic.adapters.sinks.metrics")
        if metrics is None:  # never imported: nothing routes metrics anywhere
            return None
        router = self._spec.metrics or metrics.process_router()
        handler = router.handler_for(metrics.DEFAULT_GROUP)
        exposition = getattr(handler, "exposition", None)
        return None if exposition is None else exposition()

    def _start_status(self) -> None:
        # Dynamic backends only: their store is the job's, and every member can reach it.
        handler = self._spec.rdzv_handler
        store, node = getattr(handler, "store", None), getattr(handler, "node_id", None)
        interval = float(os.environ.get(STATUS_INTERVAL_ENV, _STATUS_EVERY) or 0)
        if store is None or not isinstance(node, str) or interval <= 0:
            return
        if type(store).__module__ == "tpelastic.adapters.stores.memory":
            return  # a one-node job's own memory: nobody else could read it
        from tpelastic.adapters.status import StatusPublisher, status_key

        self._node = node
        key = status_key(self._run_id(), node)
        self._status = StatusPublisher(store, key, self.status_record, interval)
        self._status.start()

    def close(self) -> None:
        """Stop the servers and remove the run folder; idempotent, never raises."""
        if self._status is not None:
            self._status.close()
            self._status = None
        handler = self._spec.rdzv_handler
        if getattr(handler, "record_join_step", None) == self._join_stepped:
            handler.record_join_step = None
        for server, stop in ((self._timer, "stop"), (self._health, "close")):
            if server is not None:
                try:
                    getattr(server, stop)()
                except Exception:  # closing must not hide how the run ended
                    pass
        self._timer = self._health = None
        if self._dir is not None:
            _remove_folder(self._dir)
            self._dir = None

    # -- events ---------------------------------------------------------------------------------

    def stepped(self, before: core.AgentState, observation: object, result: Any) -> None:
        """Record one step of the core as an ``agent.step`` event (when events are on).

        A step that changes nothing and orders nothing (nodes waiting while the world is full,
        seen at every look) is not recorded: it would repeat every 0.25 s, and leaving it out
        changes no replay.
        """
        if self._status is not None and result.state != before:
            self._status.kick()
        if result.effects:
            self._console(before, result.effects)
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
            now_wall=self._clock.wall(),
        )
        self._seq += 1
        self._events.handle(event)

    def _console(self, before: core.AgentState, effects: Any) -> None:
        """Lines for people about what the step's effects are about to do (never raises)."""
        handler = self._spec.rdzv_handler
        store = getattr(handler, "store", None)
        try:
            from tpelastic.adapters.sinks import console_lines as lines

            for effect in effects:
                kind = type(effect).__name__
                if kind == "StopWorkers" and store is not None:
                    found = _OPENED.match(effect.reason)
                    previous = getattr(handler, "result", None)
                    if found and previous is not None:
                        round_no = int(found.group(1))
                        gone = lines.gone_reasons(store, self._run_id(), round_no, previous)
                        log.info("%s", lines.opened_line(round_no, found.group(2), gone))
                    elif effect.reason == "scale_up":
                        log.info("%s", lines.opened_line(before.round + 1, "scale_up", {}))
                elif kind == "JoinRendezvous":
                    config = getattr(getattr(handler, "settings", None), "config", None)
                    if config is not None:
                        hint = "the first round" if before.round < 0 else "the next round"
                        log.info("%s", lines.waiting_line(config, hint))
        except Exception as error:  # a console line must never cost the job
            log.debug("console line skipped: %s", error)

    def _round_line(self) -> None:
        handler = self._spec.rdzv_handler
        store, result = getattr(handler, "store", None), getattr(handler, "result", None)
        if store is None or result is None:
            return
        try:
            from tpelastic.adapters.sinks import console_lines as lines

            previous, self._previous_round = self._previous_round, result
            if previous is None:
                return  # the first round: the start line says who this node is in it
            gone = lines.gone_reasons(store, self._run_id(), result.round_no, previous)
            log.info("%s", lines.joined_line(previous, result, gone))
        except Exception as error:  # a console line must never cost the job
            log.debug("console line skipped: %s", error)

    def _join_stepped(self, **step: Any) -> None:
        """Record one step of the rendezvous join machine as an ``rdzv.step`` event."""
        if self._events is None:
            return
        from tpelastic.adapters.sinks.join_trace import step_event

        self._events.handle(step_event(now_wall=self._clock.wall(), **step))

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
        if name == "round_joined":
            self._round_line()
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
                message=message,
                hostname=socket.gethostname(),
                pid=os.getpid(),
                node_state=NodeState(state),
                rank=rank if rank >= 0 else None,
                error_trace=_current_trace() if state == "FAILED" else "",
                round=round_no,
                node=self.agent_id,
                timestamp=self._clock.wall(),
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
        if self._spec.stall_timeout is not None:
            # Record which collective each worker is in, so a hang names the rank that never
            # reached it (tpelastic.adapters.collectives, loaded by the boot sitecustomize).
            from tpelastic.adapters.boot import BOOT_DIR

            path = os.pathsep.join(p for p in (BOOT_DIR, os.environ.get("PYTHONPATH")) if p)
            for extra in added.values():
                extra[COLLECTIVES_ENV] = "1"
                extra["PYTHONPATH"] = path
        return {rank: {**env, **added[rank]} for rank, env in envs.items()}

    def _new_watch(self, round_no: int, ranks: list[int], now: float) -> None:
        from tpelastic.adapters.progress import ProgressWatch
        from tpelastic.core.progress import progress_config

        assert self._dir is not None
        for old in self._progress_files.values():
            try:
                os.unlink(old)
            except OSError:
                pass
        spec = self._spec
        config = progress_config(spec.stall_timeout, spec.stall_first_step_timeout)
        with self._lock:
            self._progress_files = {
                r: os.path.join(self._dir, f"progress_r{round_no}_{r}") for r in ranks
            }
            self._watch = ProgressWatch.from_config(ranks, now, config)
            self._live = tuple(ranks)
            self._straggling = set()

    def workers_stopped(self, pids: set[int]) -> None:
        """The attempt is over: stop watching its progress and drop its workers' timers."""
        if self._timer is not None:
            self._timer.forget_workers(pids)
        with self._lock:
            self._live = ()
            for pid in pids:
                self._expired.pop(pid, None)

    def stuck(self, now: float, live_ranks: Callable[[], tuple[int, ...]]) -> Any | None:
        """The core's verdict on one read of the progress files: the ``Stall`` of the likely
        cause among the stuck live local ranks, or None (also when not watching).

        ``live_ranks()`` (asked only when the files are due to be read) says which local ranks'
        processes still run: a worker that has ended is never stuck.
        """
        if self._watch is None or now < self._next_read:
            return None
        from tpelastic.adapters.agent import publish
        from tpelastic.adapters.progress import read_progress

        self._next_read = now + _READ_EVERY
        live = live_ranks()
        with self._lock:
            self._live = live
            read = {rank: read_progress(path) for rank, path in self._progress_files.items()}
            stall = self._watch.read(read, now, live)
            samples = self._watch.samples()
        first = self._state().group_rank * self._spec.local_world_size
        published = publish.Publisher(self._spec.metrics)
        for rank, sample in samples.items():
            if sample is not None and sample.counter > 0:
                published.rank_progress(first + rank, sample.counter, sample.step_seconds)
        self._check_stragglers(first, samples)
        return stall

    def _check_stragglers(self, first: int, samples: dict[int, Any]) -> None:
        """Log each local rank once per attempt when its last step takes the straggler factor
        times the local median or more (``TPELASTIC_STRAGGLER_FACTOR``, default 2)."""
        timed = {r: s.step_seconds for r, s in samples.items() if s and s.step_seconds}
        if len(timed) < 2:
            return
        from tpelastic.adapters.agent import publish
        from tpelastic.adapters.status import STRAGGLER_FACTOR, stragglers

        factor = float(os.environ.get(STRAGGLER_FACTOR_ENV) or STRAGGLER_FACTOR)
        entries = [{"rank": first + r, "step_time_s": t} for r, t in timed.items()]
        slow = stragglers(entries, factor)
        publish.Publisher(self._spec.metrics).stragglers(len(slow))
        for entry in slow:
            if entry["rank"] not in self._straggling:
                self._straggling.add(entry["rank"])
                log.warning(
                    "rank %d is a straggler: its last step took %.3f s, %.1fx the median of "
                    "this node's ranks",
                    entry["rank"],
                    entry["step_time_s"],
                    entry["ratio"],
                )

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
        now = self._clock.now()
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

    def culprit(self, stall: Any, global_rank: int) -> str:
        """Who ``stall`` waits for, when it waits in a collective: the rank of the job (this
        node's or another's, from their status records) that entered fewer collectives and is
        not waiting in one. "" when there is none, or nothing to compare with.
        """
        if not stall.waiting or not stall.collectives:
            return ""
        ranks = self._local_entries()
        if self._status is not None:
            try:
                view = self.job_view()
                ranks = [r for r in view["ranks"] if r["node"] != self._node] + ranks
            except Exception as error:  # the store is slow or gone: name what we can see here
                log.debug("status records not read for the stall: %s", error)
        from tpelastic.adapters.status import behind

        found = behind(ranks, stall.collectives)
        if found is None:
            return ""
        where = f" (node {found['node_rank']}, {found['host']})"
        return (
            f"waits for rank {found['rank']}{where}, which never reached "
            f"{stall.collective or 'the collective'} #{stall.collectives} "
            f"(it entered {found['collectives']} collectives; last step {found['step']})"
        )

    def _local_entries(self) -> list[dict[str, Any]]:
        record = self.status_record(0)
        mine = {"node": self._node, "host": record["host"], "node_rank": record["group_rank"]}
        return [{**r, **mine} for r in record["ranks"]]

    def job_view(self) -> dict[str, Any]:
        """The whole job's status view, read from the store (what ``/status`` answers)."""
        from tpelastic.adapters.status import read_view

        return read_view(self._spec.rdzv_handler.store, self._run_id())

    def status_record(self, seq: int) -> dict[str, Any]:
        """This node's status record (see :mod:`tpelastic.adapters.status`)."""
        state = self._state()
        now = self._clock.now()
        first = max(state.group_rank, 0) * self._spec.local_world_size
        ranks = []
        with self._lock:
            if self._watch is not None:
                ages = self._watch.last_progress_age(now)
                for local, sample in sorted(self._watch.samples().items()):
                    live = local in self._live
                    ranks.append(
                        {
                            "rank": first + local,
                            "local_rank": local,
                            "step": sample.counter if sample is not None else None,
                            "age_s": round(ages[local], 3) if live else None,
                            "step_time_s": sample.step_seconds if sample is not None else None,
                            "waiting": bool(sample is not None and sample.waiting),
                            "collectives": sample.collectives if sample is not None else 0,
                            "collective": sample.collective if sample is not None else "",
                        }
                    )
        return {
            "run_id": self._run_id(),
            "node": self._node,
            "host": os.uname().nodename,
            "pid": os.getpid(),
            "role": self._spec.role,
            "state": state.phase.name,
            "round": state.round,
            "attempt": state.attempt,
            "group_rank": state.group_rank,
            "group_world_size": state.group_world_size,
            "local_world_size": self._spec.local_world_size,
            "restart_count": state.restart_count,
            "max_restarts": self._spec.max_restarts,
            "last_failure": state.last_failure or None,
            "seq": seq,
            "ranks": ranks,
        }

    def _read_all(self, now: float) -> None:
        from tpelastic.adapters.progress import read_progress

        for rank, path in self._progress_files.items():
            self._watch.observe(rank, read_progress(path), now)


def describe_stall(stall: Any, global_rank: int, cause: str = "") -> str:
    """``local rank 1 (rank 3) is stuck: no progress for 30.2 s (last step 812)``, and with a
    cause ``...; waits for rank 5 on node7, which never reached all_reduce #12 ...``."""
    last = "no step yet" if stall.counter in (None, 0) else f"last step {stall.counter}"
    why = ""
    if stall.waiting:
        why = f", waiting in {stall.collective or 'a collective'}"
    text = (
        f"local rank {stall.rank} (rank {global_rank}) is stuck: "
        f"no progress for {stall.idle_for:.1f} s ({last}{why})"
    )
    return f"{text}; {cause}" if cause else text


def _current_trace() -> str:
    """The exception being handled, as torch's rendezvous events carry it ("" when none)."""
    if sys.exc_info()[1] is None:
        return ""
    import traceback

    return traceback.format_exc()


def _remove_folder(path: str) -> None:
    """Remove the agent's run folder (files only: the timer pipe, progress files) without
    importing shutil; never raises."""
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                os.unlink(entry.path)
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError:  # something else in there: the general tool
        import shutil

        shutil.rmtree(path, ignore_errors=True)


__all__ = ["PROGRESS_FILE_ENV", "TIMER_FILE_ENV", "Observers", "describe_stall"]
