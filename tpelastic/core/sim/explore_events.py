"""The explorer's events: which may happen in a world (``enabled``), and what each does
(``apply``). Each node runs the given join ``step``; agents between rounds act as in
:mod:`tpelastic.core.sim.cluster` (watch the next round, restart in place when its next attempt
opens, report a dead successor, rejoin). A ``restart`` is a worker failure restarted in place:
the node opens its round's next attempt and runs it; the others learn of it on their next look
(``watch``), which covers every moment a held wait could wake them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import attrs
from attrs import evolve

from tpelastic.core.rendezvous import attempts, membership
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
from tpelastic.core.rendezvous.records import (
    RoundResult,
    decode_counter,
)
from tpelastic.core.rendezvous.state import JoinRequested, JoinState
from tpelastic.core.sim.explore_model import (
    KEYS,
    Bounds,
    Label,
    Node,
    Phase,
    StepFn,
    Violation,
    World,
    _results,
)
from tpelastic.core.values import Rejected

# --- which events may happen next --------------------------------------------------------------


def enabled(world: World, bounds: Bounds) -> Iterator[Label]:
    """Every event that may happen in ``world``, in a fixed order."""
    used = dict(world.used)
    store = dict(world.store)
    if used.get("tick", 0) < bounds.ticks:
        yield ("tick", "")
    for node in world.nodes:
        yield from _node_events(node, world, store, used, bounds)


def _node_events(
    node: Node, world: World, store: dict[str, bytes], used: dict[str, int], bounds: Bounds
) -> Iterator[Label]:
    name = node.name
    if node.phase is Phase.IDLE:
        yield ("start", name)
    pending = node.pending
    if isinstance(pending, StoreOps):
        yield ("deliver", name)
    elif isinstance(pending, StoreWait):
        if all(k in store for k in pending.keys):
            yield ("wake", name)
        elif pending.deadline <= world.now:
            yield ("expire", name)
    if node.phase in (Phase.JOINING, Phase.TRAINING) and used.get("crash", 0) < bounds.crashes:
        yield ("crash", name)
    if node.phase is Phase.TRAINING:
        yield ("watch", name)
        if used.get("leave", 0) < bounds.leaves:
            yield ("leave", name)
        if used.get("fail", 0) < bounds.failures:
            yield ("fail", name)
        if used.get("restart", 0) < bounds.restarts:
            yield ("restart", name)
        if used.get("close", 0) < bounds.closes:
            yield ("close", name)


# --- what each event does ----------------------------------------------------------------------


def apply(world: World, label: Label, config: RendezvousConfig, step: StepFn) -> World:
    """The world after ``label``. Raises Violation for a transition-level invariant (R2, or the
    machine rejecting an event it was fed)."""
    kind, name = label
    if kind == "tick":
        return _tick(_count(world, "tick"), config)
    index = next(i for i, n in enumerate(world.nodes) if n.name == name)
    node = world.nodes[index]
    store = dict(world.store)
    ctx = _Ctx(world=world, store=store, config=config, step=step)
    node = _EVENTS[kind](ctx, node)
    nodes = world.nodes[:index] + (node,) + world.nodes[index + 1 :]
    out = evolve(ctx.world, store=tuple(sorted(store.items())), nodes=nodes)
    return _count(out, kind) if kind in ("crash", "leave", "fail", "restart", "close") else out


@attrs.define
class _Ctx:
    world: World
    store: dict[str, bytes]
    config: RendezvousConfig
    step: StepFn

    def run(self, ops: tuple[Op, ...]) -> tuple[Any, ...]:
        return run_ops(ops, self.store)

    def feed(self, node: Node, event: object) -> Node:
        result = self.step(node.join, event, self.config)
        node = evolve(node, join=result.state, pending=None)
        for effect in result.effects:
            if isinstance(effect, (StoreOps, StoreWait)):
                node = evolve(node, pending=effect)
            elif isinstance(effect, JoinSucceeded):
                node = self._trained(node, effect.result)
            elif isinstance(effect, JoinFailed):
                node = evolve(node, phase=Phase.STOPPED, pending=None)
            elif isinstance(effect, Rejected):
                raise Violation(
                    "machine", f"{node.name}: {effect.event} rejected in {effect.phase}"
                )
        return node

    def _trained(self, node: Node, result: RoundResult) -> Node:
        if result.round_no <= node.last_round:
            raise Violation(
                "R2", f"{node.name} completed round {result.round_no} after {node.last_round}"
            )
        return evolve(
            node,
            phase=Phase.TRAINING,
            world=result,
            last_round=result.round_no,
            pending=None,
            attempt=0,
        )

    def begin(self, node: Node, reason: str, from_round: int | None, seen: int = 0) -> Node:
        """Start a join; ``seen``: an attempt of ``from_round`` the node saw opened."""
        ran = max(node.attempt, seen) if from_round == node.last_round else 0
        node = evolve(
            node, phase=Phase.JOINING, world=None, ring=LivenessTracker(), join=JoinState()
        )
        event = JoinRequested(
            run_id=KEYS.run_id,
            node=node.name,
            now=self.world.now,
            from_round=from_round,
            reason=reason,
            attempt=ran,
        )
        return self.feed(node, event)


def _start(ctx: _Ctx, node: Node) -> Node:
    ctx.run((Add(KEYS.heartbeat(node.name), 1),))
    return ctx.begin(node, "first", None)


def _deliver(ctx: _Ctx, node: Node) -> Node:
    assert isinstance(node.pending, StoreOps)
    replies = ctx.run(node.pending.ops)
    return ctx.feed(node, OpsDone(replies=replies, now=ctx.world.now))


def _end_wait(ctx: _Ctx, node: Node) -> Node:
    assert isinstance(node.pending, StoreWait)
    present = all(k in ctx.store for k in node.pending.keys)
    return ctx.feed(node, WaitEnded(present=present, now=ctx.world.now))


def _crash(ctx: _Ctx, node: Node) -> Node:
    return evolve(node, phase=Phase.STOPPED, pending=None, world=None)


def _leave(ctx: _Ctx, node: Node) -> Node:
    assert node.world is not None
    ctx.run(membership.leave_ops(KEYS, node.world, node.name))
    return evolve(node, phase=Phase.STOPPED, pending=None, world=None)


def _fail(ctx: _Ctx, node: Node) -> Node:
    assert node.world is not None
    return ctx.begin(node, "failure", node.world.round_no)


def _restart(ctx: _Ctx, node: Node) -> Node:
    assert node.world is not None
    attempt = node.attempt + 1
    ctx.run(attempts.open_attempt_ops(KEYS, node.world.round_no, attempt, "failure"))
    return evolve(node, attempt=attempt)


def _close(ctx: _Ctx, node: Node) -> Node:
    assert node.world is not None
    ctx.run(membership.close_ops(KEYS, node.world.round_no + 1, "succeeded", f"by {node.name}"))
    done = frozenset(r for r, res in _results(ctx.store).items() if not res.closed)
    ctx.world = evolve(ctx.world, results_at_close=done)
    return node


def _watch(ctx: _Ctx, node: Node) -> Node:
    world = node.world
    assert world is not None
    look = membership.watch_ops(KEYS, world.round_no, node.attempt)
    seen = membership.read_watch(ctx.run(look))
    newer = node.attempt + 1 if seen.next_attempt is not None else 0
    if seen.closed is not None:
        return evolve(node, phase=Phase.STOPPED, world=None)
    if seen.next_opened is not None:
        return ctx.begin(node, "rejoin", world.round_no, newer)
    if newer:
        return evolve(node, attempt=newer)
    if seen.waiting > 0 and world.world_size < ctx.config.max_nodes:
        return ctx.begin(node, "scale_up", world.round_no)
    successor = membership.ring_successor(world, node.name)
    if successor is None:
        return node
    beat = decode_counter(ctx.store.get(KEYS.heartbeat(successor)))
    ring = node.ring.observe(successor, beat, ctx.world.now)
    if ring.is_dead(successor, ctx.world.now, ctx.config.heartbeat_timeout):
        ctx.run(membership.report_dead_ops(KEYS, world, successor))
        return ctx.begin(node, "membership", world.round_no)
    return evolve(node, ring=ring)


_EVENTS: dict[str, Callable[[_Ctx, Node], Node]] = {
    "start": _start,
    "deliver": _deliver,
    "wake": _end_wait,
    "expire": _end_wait,
    "crash": _crash,
    "leave": _leave,
    "fail": _fail,
    "restart": _restart,
    "close": _close,
    "watch": _watch,
}


def _tick(world: World, config: RendezvousConfig) -> World:
    """Time moves one heartbeat interval; every running node's keep-alive bumps its counter."""
    store = dict(world.store)
    for node in world.nodes:
        if node.phase in (Phase.JOINING, Phase.TRAINING):
            run_ops((Add(KEYS.heartbeat(node.name), 1),), store)
    now = world.now + config.heartbeat_interval
    return evolve(world, now=now, store=tuple(sorted(store.items())))


def _count(world: World, kind: str) -> World:
    used = dict(world.used)
    used[kind] = used.get(kind, 0) + 1
    return evolve(world, used=tuple(sorted(used.items())))
