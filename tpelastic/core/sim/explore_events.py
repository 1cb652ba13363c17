"""The explorer's events: which may happen in a world (``enabled``), and what each does
(``apply``).

Every node steps the product's core, as the run loop does: observations go through the
composed ``node_step`` (membership machine, agent table, restart budget) and its effects are
carried out in order (the handlers below mirror the adapters': they decide nothing); the agent's
joins run the join machine ``step``. What an event does to a node becomes the observation its
adapters would feed: a store batch landing or a wait ending (the join machine), a look at the
round's watch keys and the ring successor's heartbeat (``LookDone``, then ``NextRoundOpened``
for a dead successor), the keep-alive read at every tick (``KeepAliveRead``), a held
failure's timer (``TimePassed``), worker exits, a signal, the exit barrier.

A handler's store write (an attempt's open, a leave, a close) holds the node's loop until the
store answers (``send``); an open's landing is then the node's observation (``OpenLanded``).
While the store is paused (its process stopped, or an outage the store client sees as a
silence: it waits such an outage out for ``read_timeout``, longer than any search) every call
waits and no heartbeat lands. With the store gone (its host died) every
call fails through the store client's outage rule (``core.store_outage``): retried until the
keep-alive expiry, then failed with one line; a join's loss then goes through the join's retry
table (``core.rendezvous.join_retry``), which gives up on a loss waited out.

Every transition into a failed agent is judged (``S6``): a give-up is fine only as a terminal
outcome (the budget spent, the job closed, a signal) or once the store is gone for good.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import attrs
from attrs import evolve

from tpelastic.core import agent as ag
from tpelastic.core import membership as mb
from tpelastic.core.agent.states import TERMINAL
from tpelastic.core.group_values import WorkerFailure
from tpelastic.core.node import NodeConfig
from tpelastic.core.rendezvous import attempts, join_retry
from tpelastic.core.rendezvous import membership as rz
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.liveness import LivenessTracker
from tpelastic.core.rendezvous.ops import (
    Add,
    JoinFailed,
    JoinSucceeded,
    Op,
    OpsDone,
    StoreOps,
    StoreWait,
    WaitEnded,
    run_ops,
)
from tpelastic.core.rendezvous.records import decode_closed, decode_counter
from tpelastic.core.rendezvous.state import JoinRequested, JoinState
from tpelastic.core.sim.explore_model import (
    INTERVAL,
    KEYS,
    STORE_HOST,
    Bounds,
    CoreFn,
    Label,
    Node,
    Phase,
    StepFn,
    StoreState,
    Violation,
    World,
    _results,
)
from tpelastic.core.sim.nodes import round_completed
from tpelastic.core.store_outage import GiveUp, on_failure
from tpelastic.core.values import Emit, Rejected

SIGTERM = 15  # a graceful leave (the core imports no signal module)
# Whose keep-alive a lapse fences, and whose landing heartbeat ends the fence.
_READS_KEEP_ALIVE = frozenset({ag.AgentPhase.RUNNING, ag.AgentPhase.FENCED})
# Faults (bounded by ``Bounds``) and the events that end them.
FAULTS = frozenset(
    {"crash", "leave", "fail", "finish", "pause", "delay", "cut", "store_pause", "host_death"}
)
ENDS_OF_FAULTS = frozenset({"resume", "reconnect", "store_resume"})
_BOUND = {
    "crash": "crashes",
    "leave": "leaves",
    "fail": "failures",
    "finish": "finishes",
    "pause": "pauses",
    "delay": "delays",
    "cut": "cuts",
    "store_pause": "store_pauses",
    "host_death": "host_deaths",
}

# --- which events may happen next --------------------------------------------------------------


def enabled(world: World, bounds: Bounds) -> Iterator[Label]:
    """Every event that may happen in ``world``, in a fixed order."""
    used = dict(world.used)

    def left(kind: str) -> bool:
        bound: int = getattr(bounds, _BOUND[kind])
        return used.get(kind, 0) < bound

    if used.get("tick", 0) < bounds.ticks:
        yield ("tick", "")
    store = world.store_state
    host = _host(world, bounds)
    if store is StoreState.UP:
        if left("store_pause"):
            yield ("store_pause", "")
    elif store is StoreState.PAUSED and not (host is not None and host.paused):
        yield ("store_resume", "")
    if host is not None and host.phase is Phase.UP and store is not StoreState.GONE:
        if left("host_death"):
            yield ("host_death", host.name)
    for node in world.nodes:
        yield from _node_events(node, world, left)


def _host(world: World, bounds: Bounds) -> Node | None:
    return world.nodes[0] if bounds.store_host and world.nodes else None


def _node_events(node: Node, world: World, left: Callable[[str], bool]) -> Iterator[Label]:
    name = node.name
    if node.phase is Phase.IDLE:
        yield ("start", name)
    if node.phase is not Phase.UP:
        return
    if left("crash"):
        yield ("crash", name)
    if node.paused:
        yield ("resume", name)
        return
    if left("pause"):
        yield ("pause", name)
    if left("delay") and not node.delayed:
        yield ("delay", name)
    if node.cut:
        yield ("reconnect", name)
    elif left("cut"):
        yield ("cut", name)
    store = world.store_state
    # A node cut off from the store sees it as paused: its calls wait, its beats do not land.
    up, gone = store is StoreState.UP and not node.cut, store is StoreState.GONE
    pending = node.pending
    if node.outbox is not None:
        if up or gone:
            yield ("send", name)
        return  # its loop waits in the handler
    if pending is not None:
        if gone:
            yield ("lost", name)
        elif up and isinstance(pending, StoreOps):
            yield ("deliver", name)
        elif up and isinstance(pending, StoreWait):
            if all(k in dict(world.store) for k in pending.keys):
                yield ("wake", name)
            elif pending.deadline <= world.now:
                yield ("expire", name)
    if not node.member:
        return
    agent = node.agent
    if agent.phase is ag.AgentPhase.HOLDING and (agent.held_until or 0.0) <= world.now:
        yield ("timer", name)
    if agent.phase is ag.AgentPhase.EXIT_BARRIER and up:
        yield ("barrier", name)
    if agent.phase is ag.AgentPhase.RUNNING and node.workers is not None:
        if left("fail"):
            yield ("fail", name)
        if left("finish"):
            yield ("finish", name)
        if left("leave"):
            yield ("leave", name)
    if up or gone:
        yield ("look", name)


def _arrived(node: Node, world: World) -> int:
    """How many members of the node's world reached its exit barrier (or passed it)."""
    assert node.world is not None
    names = {p.node for p in node.world.participants}
    done = (ag.AgentPhase.EXIT_BARRIER, ag.AgentPhase.SUCCEEDED)
    return sum(
        1
        for n in world.nodes
        if n.name in names and n.agent.phase in done and n.agent.round == node.world.round_no
    )


# --- what each event does ----------------------------------------------------------------------


def apply(world: World, label: Label, bounds: Bounds, step: StepFn, core: CoreFn) -> World:
    """The world after ``label``. Raises Violation for a transition-level invariant (R2, S6, or
    the join machine rejecting an event it was fed)."""
    kind, name = label
    ctx = _Ctx(
        now=world.now,
        store=dict(world.store),
        nodes=list(world.nodes),
        store_state=world.store_state,
        results_at_close=world.results_at_close,
        closed_by=world.closed_by,
        bounds=bounds,
        config=bounds.config(),
        step=step,
        core=core,
    )
    if name:
        _EVENTS[kind](ctx, next(i for i, n in enumerate(world.nodes) if n.name == name))
    else:
        _WORLD_EVENTS[kind](ctx)
    out = World(
        now=ctx.now,
        store=tuple(sorted(ctx.store.items())),
        nodes=tuple(ctx.nodes),
        used=world.used,
        store_state=ctx.store_state,
        results_at_close=ctx.results_at_close,
        closed_by=ctx.closed_by,
    )
    if kind == "tick" or kind in FAULTS:
        used = dict(out.used)
        used[kind] = used.get(kind, 0) + 1
        out = evolve(out, used=tuple(sorted(used.items())))
    return out


_CONFIGS: dict[tuple[Bounds, str], NodeConfig] = {}
_RETRY = join_retry.JoinRetryConfig()


@attrs.define
class _Ctx:
    now: float
    store: dict[str, bytes]
    nodes: list[Node]
    store_state: StoreState
    results_at_close: frozenset[int] | None
    closed_by: str
    bounds: Bounds
    config: RendezvousConfig
    step: StepFn
    core: CoreFn

    def node_config(self, name: str) -> NodeConfig:
        config = _CONFIGS.get((self.bounds, name))
        if config is None:
            config = _CONFIGS[(self.bounds, name)] = self.bounds.node_config(name)
        return config

    def set(self, i: int, **changes: Any) -> Node:
        node = self.nodes[i] = evolve(self.nodes[i], **changes)
        return node

    # --- the store ----------------------------------------------------------------------------

    def run(self, ops: tuple[Op, ...]) -> tuple[Any, ...]:
        return run_ops(ops, self.store)

    def call_failed(self, i: int) -> bool:
        """A call of node ``i`` found the store gone: its store client's outage rule decides.
        True when the outage is waited out (every call fails from now on)."""
        node = self.nodes[i]
        if node.lost:
            return True
        outage, verdict = on_failure(
            node.outage, "gone", self.now, self.bounds.policy(), where="the store", tries=1
        )
        lost = verdict.reason if isinstance(verdict, GiveUp) else ""
        self.set(i, outage=outage, lost=lost)
        return bool(lost)

    # --- the node's core ----------------------------------------------------------------------

    def observe(self, i: int, observation: object, reason: str = "", seen: int = 0) -> bool:
        """Step node ``i``'s core with one observation and carry out the effects in order; True
        when it was news (an effect other than a rejection). ``reason`` and ``seen``: the
        opening reason and the attempt a look saw opened, for a join the step asks for."""
        node = self.nodes[i]
        if node.phase is not Phase.UP or node.agent.phase in TERMINAL:
            return False
        done = self.core(node.core, observation, self.node_config(node.name))
        self.set(i, core=done.state)
        self._judge(node, done.agent_steps)
        self.carry_out(i, done.effects, reason, seen)
        return any(not isinstance(e, Rejected) for e in done.effects)

    def _judge(self, node: Node, taken: tuple[Any, ...]) -> None:
        """S6: an agent fails only as a terminal outcome of the job (its budget spent, the job
        closed, a signal), or once the store is gone for good."""
        for agent_step in taken:
            if agent_step.result.state.phase is not ag.AgentPhase.FAILED:
                continue
            before, event = agent_step.before, agent_step.event
            if isinstance(event, (ag.RendezvousClosed, ag.SignalReceived)):
                return
            if isinstance(event, ag.RendezvousFailed):
                if self.store_state is StoreState.GONE or KEYS.closed() in self.store:
                    return
            elif isinstance(event, (ag.WorkersFailed, ag.WorkerStuck, ag.TimePassed)):
                if before.restart_count >= self.bounds.max_restarts:
                    return
            why = agent_step.result.state.last_failure or type(event).__name__
            used = f"{before.restart_count} of {self.bounds.max_restarts} restarts used"
            raise Violation("S6", f"{node.name} gave up ({why}) with the job able to go on, {used}")

    def carry_out(
        self, i: int, effects: tuple[object, ...], reason: str = "", seen: int = 0
    ) -> None:
        for index, effect in enumerate(effects):
            handler = _HANDLERS.get(type(effect))
            if handler is None:
                raise TypeError(f"no handler for the agent's effect {effect!r}")
            hint = handler(self, i, effect, reason, seen)
            if isinstance(hint, tuple):  # a write waits for the store: so does the rest
                self.set(i, outbox=(effect, hint, effects[index + 1 :]))
                return
            if isinstance(hint, str):
                reason = hint
        self._exit_if_over(i)

    def _exit_if_over(self, i: int) -> None:
        node = self.nodes[i]
        if node.phase is Phase.UP and node.agent.phase in TERMINAL and node.outbox is None:
            self.set(i, phase=Phase.ENDED, workers=None, pending=None)

    def write(self, i: int, ops: tuple[Op, ...]) -> tuple[Op, ...] | None:
        """A handler's store write: done now (None), or returned to wait for the store."""
        if not ops:
            return None
        if self.store_state is StoreState.UP and not self.nodes[i].cut:
            self.land(i, ops)
            return None
        return ops

    def land(self, i: int, ops: tuple[Op, ...]) -> None:
        closing = KEYS.closed() not in self.store
        self.run(ops)
        if closing and KEYS.closed() in self.store:
            self.closed_by = self.nodes[i].name
            done = frozenset(r for r, res in _results(self.store).items() if not res.closed)
            self.results_at_close = done

    # --- the join machine ---------------------------------------------------------------------

    def feed(self, i: int, event: object) -> None:
        node = self.nodes[i]
        result = self.step(node.join, event, self.config)
        self.set(i, join=result.state, pending=None)
        for effect in result.effects:
            if isinstance(effect, (StoreOps, StoreWait)):
                self.set(i, pending=effect)
            elif isinstance(effect, JoinSucceeded):
                self._joined(i, effect)
            elif isinstance(effect, JoinFailed):
                self._join_failed(i, effect)
            elif isinstance(effect, Rejected):
                raise Violation(
                    "machine", f"{node.name}: {effect.event} rejected in {effect.phase}"
                )

    def begin(self, i: int, reason: str, charged: int | None, seen: int) -> None:
        node = self.nodes[i]
        agent = node.agent
        from_round = agent.round if agent.round >= 0 else None
        attempt = 0
        if from_round is not None:
            attempt = max(node.attempt, seen)
            if charged is not None:
                attempt = min(attempt, charged)
        self.set(i, world=None, ring=LivenessTracker(), join=JoinState())
        event = JoinRequested(
            run_id=KEYS.run_id,
            node=node.name,
            now=self.now,
            from_round=from_round,
            reason=reason,
            attempt=attempt,
        )
        self.feed(i, event)

    def _joined(self, i: int, done: JoinSucceeded) -> None:
        node = self.nodes[i]
        result = done.result
        if result.round_no <= node.agent.round:
            raise Violation(
                "R2", f"{node.name} completed round {result.round_no} after {node.agent.round}"
            )
        self.set(i, world=result, attempt=0)
        self.observe(i, round_completed(done, self.now))

    def _join_failed(self, i: int, failed: JoinFailed) -> None:
        why = f"{failed.kind}: {failed.reason}"
        if failed.kind == "closed":
            raw = self.store.get(KEYS.closed())
            record = decode_closed(raw) if raw is not None else None
            closed = (record.outcome, record.reason) if record is not None else None
            self.observe(i, mb.JoinClosed(now=self.now, why=why, closed=closed))
            return
        kind = failed.kind if failed.kind in ("timeout", "corrupt") else "connection"
        self.observe(i, ag.RendezvousFailed(now=self.now, reason=why, kind=kind))  # type: ignore[arg-type]

    def connection_lost(self, i: int) -> None:
        """The join's call met a store that is gone. The store client retries it until the
        outage is waited out; then the join's retry table hears of the loss, and a loss
        waited out is final (the agent is told)."""
        if not self.call_failed(i):
            return
        node = self.nodes[i]
        lost = join_retry.JoinLost(now=self.now, state=node.join, waited_out=True)
        (verdict,) = join_retry.step(join_retry.RetryState(), lost, _RETRY).effects
        if not isinstance(verdict, join_retry.GiveUp):
            raise Violation("machine", f"{node.name}: a join retried past its store's outage")
        self.set(i, pending=None)
        self._join_failed(i, JoinFailed(kind="connection", reason=node.lost))


# --- the handlers of the agent's effects (the adapters' part: they decide nothing) ------------

Handler = Callable[[_Ctx, int, Any, str, int], object]


def _start_workers(ctx: _Ctx, i: int, effect: ag.StartWorkers, reason: str, seen: int) -> None:
    world = ctx.nodes[i].world
    if world is not None and world.round_no == effect.round:
        ctx.set(i, workers=effect.attempt, attempt=effect.attempt)


def _stop_workers(ctx: _Ctx, i: int, effect: ag.StopWorkers, reason: str, seen: int) -> None:
    ctx.set(i, workers=None)


def _join(ctx: _Ctx, i: int, effect: ag.JoinRendezvous, reason: str, seen: int) -> None:
    if effect.failure:
        why = "failure"
    elif reason:
        why = reason
    else:
        why = "first" if ctx.nodes[i].agent.round < 0 else "rejoin"
    ctx.begin(i, why, effect.charged_attempt, seen)


def _open_next_round(ctx: _Ctx, i: int, effect: ag.OpenNextRound, reason: str, seen: int) -> str:
    # The join that follows opens it: a member coming from the previous round writes
    # ``opened`` as it registers.
    return effect.reason


def _open_attempt(ctx: _Ctx, i: int, effect: ag.OpenAttempt, reason: str, seen: int) -> object:
    world = ctx.nodes[i].world
    if world is None or world.round_no != effect.round:
        return None
    held = ctx.write(i, attempts.open_attempt_ops(KEYS, effect.round, effect.attempt, "failure"))
    if held is None:
        _open_landed(ctx, i, effect)
    return held


def _open_landed(ctx: _Ctx, i: int, effect: ag.OpenAttempt) -> None:
    """The open landed: that, with the keep-alive then, is the node's next observation (its
    core starts the attempt's workers, or fences the node)."""
    beat = ctx.nodes[i].last_beat
    landed = mb.OpenLanded(now=ctx.now, round=effect.round, attempt=effect.attempt, last_beat=beat)
    ctx.observe(i, landed)


def _leave(ctx: _Ctx, i: int, effect: ag.LeaveRendezvous, reason: str, seen: int) -> object:
    node = ctx.nodes[i]
    if node.world is None:
        return None
    return ctx.write(i, rz.leave_ops(KEYS, node.world, node.name))


def _close(ctx: _Ctx, i: int, effect: ag.CloseRendezvous, reason: str, seen: int) -> object:
    node = ctx.nodes[i]
    forming = node.world.round_no + 1 if node.world is not None else node.join.round_no
    why = f"{effect.reason} ({node.name})"
    return ctx.write(i, rz.close_ops(KEYS, forming, effect.outcome, why))


def _nothing(ctx: _Ctx, i: int, effect: object, reason: str, seen: int) -> None:
    # The exit barrier is the ``barrier`` event; a report, a record or a rejected observation
    # change nothing in the world (the adapters log them).
    return None


_HANDLERS: dict[type, Handler] = {
    ag.StartWorkers: _start_workers,
    ag.StopWorkers: _stop_workers,
    ag.JoinRendezvous: _join,
    ag.OpenNextRound: _open_next_round,
    ag.OpenAttempt: _open_attempt,
    ag.LeaveRendezvous: _leave,
    ag.CloseRendezvous: _close,
    ag.EnterExitBarrier: _nothing,
    ag.ReportFailure: _nothing,
    Emit: _nothing,
    Rejected: _nothing,
}


# --- node events -------------------------------------------------------------------------------


def _start(ctx: _Ctx, i: int) -> None:
    ctx.set(i, phase=Phase.UP, last_beat=ctx.now)
    ctx.run((Add(KEYS.heartbeat(ctx.nodes[i].name), 1),))
    ctx.observe(i, ag.AgentStarted(now=ctx.now))


def _deliver(ctx: _Ctx, i: int) -> None:
    pending = ctx.nodes[i].pending
    assert isinstance(pending, StoreOps)
    replies = ctx.run(pending.ops)
    ctx.feed(i, OpsDone(replies=replies, now=ctx.now))


def _end_wait(ctx: _Ctx, i: int) -> None:
    pending = ctx.nodes[i].pending
    assert isinstance(pending, StoreWait)
    present = all(k in ctx.store for k in pending.keys)
    ctx.feed(i, WaitEnded(present=present, now=ctx.now))


def _lost(ctx: _Ctx, i: int) -> None:
    ctx.connection_lost(i)


def _send(ctx: _Ctx, i: int) -> None:
    """A handler's held write reaches the store; the rest of its step follows. With the store
    gone the store client retries until the outage is waited out: then an attempt's open
    fails the rendezvous (as the adapter's handler does) and any other write is dropped."""
    node = ctx.nodes[i]
    assert node.outbox is not None
    effect, ops, rest = node.outbox
    if ctx.store_state is StoreState.GONE:
        if not ctx.call_failed(i):
            return
        ctx.set(i, outbox=None)
        if isinstance(effect, ag.OpenAttempt):
            why = f"could not open attempt {effect.attempt} of round {effect.round}"
            reason = f"{why}: {ctx.nodes[i].lost}"
            failed = ag.RendezvousFailed(now=ctx.now, reason=reason, kind="connection")
            ctx.observe(i, failed)
            ctx.carry_out(i, ())
            return
    else:
        ctx.land(i, ops)
        ctx.set(i, outbox=None)
        if isinstance(effect, ag.OpenAttempt):
            _open_landed(ctx, i, effect)
    ctx.carry_out(i, rest)


def _crash(ctx: _Ctx, i: int) -> None:
    ctx.set(i, phase=Phase.DOWN, workers=None, pending=None, outbox=None)


def _leave_event(ctx: _Ctx, i: int) -> None:
    ctx.observe(i, ag.SignalReceived(now=ctx.now, signum=SIGTERM))


def _fail(ctx: _Ctx, i: int) -> None:
    node = ctx.nodes[i]
    failure = WorkerFailure(
        local_rank=0,
        global_rank=max(node.agent.group_rank, 0),
        exitcode=1,
        signal=None,
        at=ctx.now,
        reason="workers failed",
    )
    ctx.set(i, workers=None)  # they exited
    ctx.observe(i, ag.WorkersFailed(now=ctx.now, failures=(failure,)))


def _finish(ctx: _Ctx, i: int) -> None:
    ctx.set(i, workers=None)
    ctx.observe(i, ag.WorkersSucceeded(now=ctx.now))


def _timer(ctx: _Ctx, i: int) -> None:
    ctx.observe(i, ag.TimePassed(now=ctx.now))


def _barrier(ctx: _Ctx, i: int) -> None:
    view = World(nodes=tuple(ctx.nodes))
    ctx.observe(i, ag.ExitBarrierRead(now=ctx.now, arrived=_arrived(ctx.nodes[i], view)))


def _pause(ctx: _Ctx, i: int) -> None:
    ctx.set(i, paused=True)
    if ctx.bounds.store_host and ctx.nodes[i].name == STORE_HOST:
        if ctx.store_state is StoreState.UP:
            ctx.store_state = StoreState.PAUSED


def _resume(ctx: _Ctx, i: int) -> None:
    """Its clock jumped: the membership machine reads its keep-alive first (a lapse fences it)."""
    node = ctx.set(i, paused=False)
    if ctx.bounds.store_host and node.name == STORE_HOST:
        if ctx.store_state is StoreState.PAUSED:
            ctx.store_state = StoreState.UP
    if node.agent.phase in _READS_KEEP_ALIVE and node.outbox is None:
        ctx.observe(i, mb.KeepAliveRead(now=ctx.now, last_beat=node.last_beat))


def _delay(ctx: _Ctx, i: int) -> None:
    ctx.set(i, delayed=True)


def _cut(ctx: _Ctx, i: int) -> None:
    ctx.set(i, cut=True)


def _reconnect(ctx: _Ctx, i: int) -> None:
    ctx.set(i, cut=False)


def _look(ctx: _Ctx, i: int) -> None:
    node = ctx.nodes[i]
    world = node.world
    assert world is not None
    if ctx.store_state is StoreState.GONE:
        if ctx.call_failed(i):
            ctx.observe(i, mb.LookFailed(now=ctx.now, reason=ctx.nodes[i].lost))
        return
    seen = rz.read_watch(ctx.run(rz.watch_ops(KEYS, world.round_no, node.attempt)))
    newer = seen.next_attempt is not None
    closed = (seen.closed.outcome, seen.closed.reason) if seen.closed is not None else None
    look = mb.LookDone(
        now=ctx.now,
        round=world.round_no,
        closed=closed,
        next_opened=seen.next_opened,
        next_attempt=(node.attempt + 1, seen.next_attempt or "") if newer else None,
        waiting=seen.waiting,
        running=node.workers is not None,
    )
    if ctx.observe(i, look, seen=node.attempt + 1 if newer else 0):
        return
    node = ctx.nodes[i]
    successor = rz.ring_successor(world, node.name)
    if successor is None or not node.member or node.world is not world:
        return
    beat = decode_counter(ctx.store.get(KEYS.heartbeat(successor)))
    ring = node.ring.observe(successor, beat, ctx.now)
    ctx.set(i, ring=ring)
    if ring.is_dead(successor, ctx.now, ctx.bounds.heartbeat_timeout):
        ctx.run(rz.report_dead_ops(KEYS, world, successor))
        opened = ag.NextRoundOpened(now=ctx.now, round=world.round_no + 1, reason=ag.PEER_LOST)
        ctx.observe(i, opened, reason=ag.PEER_LOST)


def _host_death(ctx: _Ctx, i: int) -> None:
    _crash(ctx, i)
    ctx.store_state = StoreState.GONE


_EVENTS: dict[str, Callable[[_Ctx, int], None]] = {
    "start": _start,
    "deliver": _deliver,
    "wake": _end_wait,
    "expire": _end_wait,
    "lost": _lost,
    "send": _send,
    "crash": _crash,
    "leave": _leave_event,
    "fail": _fail,
    "finish": _finish,
    "timer": _timer,
    "barrier": _barrier,
    "pause": _pause,
    "resume": _resume,
    "delay": _delay,
    "cut": _cut,
    "reconnect": _reconnect,
    "look": _look,
    "host_death": _host_death,
}


# --- world events ------------------------------------------------------------------------------


def _tick(ctx: _Ctx) -> None:
    """Time moves one heartbeat interval: every running node's keep-alive beats (a beat that
    was late lands first), then every running member reads its keep-alive."""
    ctx.now += INTERVAL
    store_up = ctx.store_state is StoreState.UP
    for i, node in enumerate(ctx.nodes):
        if node.phase is not Phase.UP or node.paused:
            continue
        up = store_up and not node.cut
        beat = KEYS.heartbeat(node.name)
        if node.late_beat is not None and up:
            ctx.run((Add(beat, 1),))
            node = ctx.set(i, last_beat=max(node.last_beat, node.late_beat), late_beat=None)
        if node.delayed:
            late = node.late_beat if node.late_beat is not None else ctx.now
            ctx.set(i, delayed=False, late_beat=late)
        elif up:
            ctx.run((Add(beat, 1),))
            ctx.set(i, last_beat=ctx.now)
        elif ctx.store_state is StoreState.GONE:
            ctx.call_failed(i)
    for i, node in enumerate(ctx.nodes):
        if (
            node.phase is Phase.UP
            and not node.paused
            and node.outbox is None
            and node.agent.phase in _READS_KEEP_ALIVE
        ):
            if node.agent.phase is ag.AgentPhase.FENCED and node.lost:
                # Its beat failed with the outage waited out: as the adapter's, a failed look.
                ctx.observe(i, mb.LookFailed(now=ctx.now, reason=node.lost))
            else:
                ctx.observe(i, mb.KeepAliveRead(now=ctx.now, last_beat=node.last_beat))


def _store_pause(ctx: _Ctx) -> None:
    ctx.store_state = StoreState.PAUSED


def _store_resume(ctx: _Ctx) -> None:
    ctx.store_state = StoreState.UP


_WORLD_EVENTS: dict[str, Callable[[_Ctx], None]] = {
    "tick": _tick,
    "store_pause": _store_pause,
    "store_resume": _store_resume,
}

__all__ = ["ENDS_OF_FAULTS", "FAULTS", "apply", "enabled"]
