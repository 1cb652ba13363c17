"""Run the pure join machine against a real store: the rendezvous core's only I/O loop.

:func:`run_join` feeds :func:`tpelastic.core.rendezvous.join.step` its events and carries out the
effects it returns, in order, on a :class:`~tpelastic.adapters.ports.KeyValueStore`. Every decision
(which round, who closes, when to give up) stays in the core; this module only executes effects,
reads the clock, and turns outcomes into the ``Rendezvous*Error`` types. :class:`KeepAlive` bumps
the node's heartbeat counter in the background, which the core's closers time on their own clocks.

A join that loses the store after it arrived in a round is retried (until its join deadline) with
what the node knows of it; whether and how is the ``join_retry`` table
(:mod:`tpelastic.core.rendezvous.join_retry`): the core then takes up the place the node already
holds instead of arriving anew.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock, KeyValueStore
from tpelastic.adapters.rendezvous.backends import supports_leases
from tpelastic.adapters.rendezvous.errors import (
    RendezvousClosedError,
    RendezvousError,
    RendezvousJoinTimeoutError,
    RendezvousStateError,
    store_errors_as_rendezvous_errors,
)
from tpelastic.adapters.stores.errors import StoreUnavailable
from tpelastic.core.rendezvous import join, join_retry, member
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.membership import heartbeat_ops
from tpelastic.core.rendezvous.ops import (
    Add,
    Get,
    JoinFailed,
    JoinSucceeded,
    Op,
    OpsDone,
    Reply,
    Set,
    SetIfAbsent,
    SetLeased,
    StoreOps,
    StoreWait,
    WaitEnded,
)
from tpelastic.core.rendezvous.records import RoundResult, StateCorrupt
from tpelastic.core.rendezvous.state import JoinRequested, JoinState
from tpelastic.core.values import Emit, Rejected

log = logging.getLogger(__name__)

# JoinFailed.kind -> the error a caller sees. Unknown kinds fall back to the base class rather
# than being hidden, so a new failure kind in the core still surfaces as a rendezvous error.
_FAILURES: dict[str, type[RendezvousError]] = {
    "closed": RendezvousClosedError,
    "timeout": RendezvousJoinTimeoutError,
    "corrupt": RendezvousStateError,
}

# Whoever records the join machine's steps (the agent, when events are on), called with
# keyword arguments (see ``tpelastic.adapters.sinks.join_trace.step_event``).
JoinStepRecorder = Callable[..., None]
# Numbers the joins of this process in their records (a counter, not a setting).
_join_numbers = itertools.count()


def execute_ops(store: KeyValueStore, ops: tuple[Op, ...]) -> tuple[Reply, ...]:
    """Run ``ops`` one by one on ``store`` and return one reply per op, as the core expects.

    Each op is atomic on its own; the core never relies on a batch being atomic as a whole, so
    consecutive reads go out as one ``multi_get`` when the store has one (``MultiGetStore``).
    Raises ``StoreUnavailable`` (unchanged) when the store cannot be reached.
    """
    replies: list[Reply] = []
    multi_get = getattr(store, "multi_get", None)
    at = 0
    while at < len(ops):
        op = ops[at]
        at += 1
        if isinstance(op, Get) and multi_get is not None:
            # A run of reads (a closer's N slots) in one round trip where the store can.
            keys = [op.key]
            while at < len(ops) and isinstance(following := ops[at], Get):
                keys.append(following.key)
                at += 1
            replies.extend(multi_get(keys) if len(keys) > 1 else [store.get(op.key)])
        elif isinstance(op, Get):
            replies.append(store.get(op.key))
        elif isinstance(op, Set):
            store.set(op.key, op.value)
            replies.append(None)
        elif isinstance(op, Add):
            replies.append(store.add(op.key, op.amount))
        elif isinstance(op, SetIfAbsent):
            # The core wants the value stored afterwards, whoever wrote it.
            replies.append(store.set_if_absent(op.key, op.value)[1])
        elif isinstance(op, SetLeased):
            if not supports_leases(store):
                raise RuntimeError(f"the core asked for a leased key, but {store!r} has no leases")
            store.set_leased(op.key, op.value, op.ttl)  # type: ignore[attr-defined]
            replies.append(None)
        else:  # pragma: no cover - Op is a closed union
            raise RuntimeError(f"unknown store op {op!r}")
    return tuple(replies)


def run_join(
    store: KeyValueStore,
    config: RendezvousConfig,
    *,
    run_id: str,
    node: str,
    addr: str = "",
    from_round: int | None = None,
    reason: str = "first",
    clock: Clock = SYSTEM_CLOCK,
    heartbeats_held: Callable[[], bool] = lambda: True,
    reconnect_delay: float = 1.0,
    attempt: int = 0,
    record_step: JoinStepRecorder | None = None,
    held: RoundResult | None = None,
) -> JoinSucceeded:
    """Join the run's forming round and block until it completes; return this node's rank in it.

    When the store is lost after this node arrived in a round, the join is retried every
    ``reconnect_delay`` seconds until its deadline, and takes up the place the node holds: the
    round it completed with, or its slot in the round still forming. ``heartbeats_held`` says
    whether the node's heartbeats kept landing meanwhile (when not, a peer may have found it
    dead, so it re-forms its world instead of resuming it). ``attempt`` is the highest in-place
    attempt of ``from_round`` this node ran or saw opened (the next round's count carries it).
    ``record_step`` is called with every step of the join machine (for the ``rdzv.step`` events).
    ``held`` is the result of ``from_round`` this node completed with: a survivor confirming a
    proposed round then reads no O(N) record at all.

    Raises:
        RendezvousClosedError: the run is closed.
        RendezvousJoinTimeoutError: no round completed within ``config.join_timeout``.
        RendezvousStateError: the run's shared state is unreadable.
        RendezvousConnectionError: the store could not be reached (before this node arrived,
            or until the join deadline).
        RuntimeError: the machine rejected an event: a bug in the driver or the core.
    """
    context = f"joining run {run_id!r} as {node!r}"
    event = JoinRequested(
        run_id=run_id,
        node=node,
        now=clock.now(),
        addr=addr,
        from_round=from_round,
        reason=reason,
        attempt=attempt,
        held=held,
    )
    retry, retry_config = join_retry.RetryState(), join_retry.JoinRetryConfig(delay=reconnect_delay)
    with store_errors_as_rendezvous_errors(context):
        while True:
            try:
                return _drive(store, config, event, clock, context, record_step)
            except _StoreLost as lost:
                waited_out = lost.error.waited_out
                gone = join_retry.JoinLost(now=clock.now(), state=lost.state, waited_out=waited_out)
                stepped = join_retry.step(retry, gone, retry_config)
                retry = stepped.state
                (due,) = stepped.effects
                if not isinstance(due, join_retry.RetryAt):
                    raise lost.error from None
                log.warning("%s: %s; retrying in %gs", context, lost.error, reconnect_delay)
                clock.sleep(max(0.0, due.at - clock.now()))
                ready = join_retry.RetryDue(now=clock.now(), heartbeats_held=heartbeats_held())
                stepped = join_retry.step(retry, ready, retry_config)
                retry = stepped.state
                (rejoin,) = stepped.effects
                assert isinstance(rejoin, join_retry.Rejoin)
                event = rejoin.request


class _StoreLost(Exception):
    """The store failed mid-join; ``state`` is where the join stood."""

    def __init__(self, state: JoinState, error: StoreUnavailable) -> None:
        super().__init__(str(error))
        self.state = state
        self.error = error


def _drive(
    store: KeyValueStore,
    config: RendezvousConfig,
    event: object,
    clock: Clock,
    context: str,
    recorder: JoinStepRecorder | None,
) -> JoinSucceeded:
    """Step one join to its end. Raises _StoreLost when the store fails under it."""
    state = JoinState()
    record = _recording(config, event, recorder)
    while True:
        result = join.step(state, event, config)
        if record is not None:
            record(before=state, observation=event, result=result)
        state = result.state
        try:
            next_event = _carry_out(store, result.effects, clock, context)
        except StoreUnavailable as error:
            raise _StoreLost(state, error) from error
        if isinstance(next_event, JoinSucceeded):
            return next_event
        if next_event is None:
            # Every non-terminal step asks the store something; none would mean a stall.
            raise RuntimeError(f"join machine stalled in {state.phase.name} with no effect")
        event = next_event


def _recording(
    config: RendezvousConfig, first: object, recorder: JoinStepRecorder | None
) -> Callable[..., None] | None:
    """A per-join wrapper around ``recorder`` (numbering the steps), or None."""
    if recorder is None or not isinstance(first, JoinRequested):
        return None
    join_no, seqs = next(_join_numbers), itertools.count()

    def record(**step: Any) -> None:
        try:
            recorder(
                run_id=first.run_id,
                node=first.node,
                join_no=join_no,
                seq=next(seqs),
                config=config,
                **step,
            )
        except Exception as error:  # a broken sink must not break the rendezvous
            log.warning("could not record a join step: %s", error)

    return record


def _carry_out(
    store: KeyValueStore, effects: tuple[object, ...], clock: Clock, context: str
) -> object | None:
    """Carry out one step's effects in order; return the next event (or the success)."""
    next_event: object | None = None
    for effect in effects:
        if isinstance(effect, StoreOps):
            next_event = OpsDone(replies=execute_ops(store, effect.ops), now=clock.now())
        elif isinstance(effect, StoreWait):
            # The deadline is on our own clock; the store only understands a timeout.
            present = store.wait_for(effect.keys, timeout=clock.remaining(effect.deadline))
            next_event = WaitEnded(present=present, now=clock.now())
        elif isinstance(effect, JoinSucceeded):
            return effect
        elif isinstance(effect, JoinFailed):
            error = _FAILURES.get(effect.kind, RendezvousError)
            raise error(f"{context}: {effect.reason}")
        elif isinstance(effect, Rejected):
            raise RuntimeError(
                f"join machine rejected {effect.event} in {effect.phase}: {effect.reason}"
            )
        elif isinstance(effect, Emit):
            log.info("%s %s", effect.name, effect.as_dict())
        else:
            raise RuntimeError(f"join machine returned an unknown effect {effect!r}")
    return next_event


def run_member(
    store: KeyValueStore,
    state: member.MemberState,
    event: object,
    config: RendezvousConfig,
    clock: Clock,
) -> tuple[member.MemberState, object]:
    """Step a round member's machine from ``event`` to its outcome (``Looked``, ``Closed`` or
    ``Left``),
    carrying out its store requests in order; return the new state and the outcome.

    The replies are decoded into the machine's typed facts (``member.decode``) before each
    step. The caller keeps its old state when this raises: a request the store failed leaves
    nothing half done that a later look must know of.

    Raises:
        StoreUnavailable: the store could not be reached.
        StateCorrupt: the store holds something this node cannot read.
        RuntimeError: the machine rejected an event: a bug in the driver or the core.
    """
    while True:
        result = member.step(state, event, config)
        state = result.state
        next_event: object | None = None
        for effect in result.effects:
            if isinstance(effect, StoreOps):
                done = OpsDone(replies=execute_ops(store, effect.ops), now=clock.now())
                next_event = member.decode(state, done, config)
            elif isinstance(effect, (member.Looked, member.Closed, member.Left)):
                return state, effect
            elif isinstance(effect, member.MemberFailed):
                raise StateCorrupt(effect.reason)
            elif isinstance(effect, Emit) and effect.name == "rdzv.found_dead":
                said = effect.as_dict()
                log.warning(
                    "round %s: %s missed its heartbeats; reporting it dead",
                    said.get("round"),
                    said.get("node"),
                )
            elif isinstance(effect, Emit):
                log.info("%s %s", effect.name, effect.as_dict())
            elif isinstance(effect, Rejected):
                raise RuntimeError(
                    f"member machine rejected {effect.event} in {effect.phase}: {effect.reason}"
                )
            else:
                raise RuntimeError(f"member machine returned an unknown effect {effect!r}")
        if next_event is None:
            raise RuntimeError(f"member machine stalled in {state.phase.name} with no effect")
        event = next_event


class KeepAlive:
    """Beat ``RunKeys(run_id).heartbeat(node)`` every ``config.heartbeat_interval`` seconds: bump
    the counter, or (``config.leased_liveness``) write the key under this node's lease, which
    renews it; :meth:`stop` then revokes the lease, so the key is gone at once.

    Runs on a daemon thread so a stuck store never keeps the process alive. Failures are counted,
    not raised: the owner reads :attr:`consecutive_failures` and :attr:`last_success` and decides
    (e.g. fences itself) — that decision is not this thread's to make.
    """

    def __init__(
        self,
        store: KeyValueStore,
        config: RendezvousConfig,
        *,
        run_id: str,
        node: str,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._store = store
        self._key = RunKeys(run_id).heartbeat(node)
        self._ops = heartbeat_ops(RunKeys(run_id), node, config)
        self._leased = config.leased_liveness
        self._interval = config.heartbeat_interval
        self._clock = clock
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"keepalive-{node}", daemon=True)
        self.consecutive_failures = 0
        self.last_success: float | None = None
        """Clock reading (monotonic by default) of the last heartbeat that landed."""

    def start(self) -> KeepAlive:
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop beating (and revoke the lease: a graceful goodbye). Returns within ``timeout``
        (default: one interval) plus the revoke's own bound even if a store call hangs, since the
        thread is a daemon and is not needed afterwards."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(self._interval if timeout is None else timeout)
        if self._leased and supports_leases(self._store):
            self._store.revoke_lease()  # type: ignore[attr-defined]

    def __enter__(self) -> KeepAlive:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def beat(self) -> bool:
        """One heartbeat now; True when it landed."""
        try:
            execute_ops(self._store, self._ops)
        except Exception:
            # Any failure (not only StoreUnavailable) must be counted rather than kill the
            # thread: a dead keep-alive would look exactly like a dead node to its peers.
            self.consecutive_failures += 1
            # The store client says once what it waits for; a line per beat would bury it.
            level = logging.WARNING if self.consecutive_failures == 1 else logging.DEBUG
            count = self.consecutive_failures
            log.log(level, "heartbeat %s failed (%d in a row)", self._key, count)
            return False
        self.consecutive_failures = 0
        self.last_success = self._clock.now()
        return True

    def _run(self) -> None:
        # Beat at once: closers may be timing this node from the moment it arrives.
        self.beat()
        while not self._stopping.wait(self._interval):
            self.beat()


__all__ = [
    "JoinStepRecorder",
    "KeepAlive",
    "execute_ops",
    "run_join",
    "run_member",
]
