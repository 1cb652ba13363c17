"""Exhaustive checking: every interleaving of a bounded set of events, breadth first.

For a small configuration (say 3 nodes, min 2) the explorer enumerates every order in which the
nodes' individual store batches can land, waits can wake or expire, time can tick, and a bounded
number of starts, crashes, graceful leaves, worker failures and closes can happen. Each node runs
the real join machine (or any ``step`` function with its signature, e.g. a deliberately broken
table in a test). Every reachable state is checked against the safety invariants R1-R7 of
``specs/rendezvous_join.md``; states are deduplicated by a canonical hashable form.

The abstraction: a store batch is atomic and lands when the explorer delivers it (any order
across nodes, in order per node); time moves in steps of ``heartbeat_interval`` (``tick``), and
each tick bumps the heartbeat counter of every node still running, so a node is found dead
exactly when it stopped (crashed, left or failed) and enough ticks passed. A wait may end early
when its keys exist (``wake``) or once its deadline has passed (``expire``).

Breadth-first search finds a shortest event sequence to any violation: the counterexample is
minimal in length and replays with :func:`replay`.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs
from attrs import evolve, frozen

from tpelastic.core.rendezvous import join, membership
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
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
    decode_node,
    decode_result,
)
from tpelastic.core.rendezvous.state import JoinRequested, JoinState
from tpelastic.core.table import Step
from tpelastic.core.values import Rejected

StepFn = Callable[[JoinState, object, RendezvousConfig], Step[JoinState]]
Label = tuple[str, str]  # (event, node) -- node "" for tick
KEYS = RunKeys("explore")


@frozen(kw_only=True)
class Bounds:
    """How much of the world to explore: nodes, bounds and how many of each event may happen."""

    nodes: int = 3
    min_nodes: int = 2
    max_nodes: int = 3
    ticks: int = 3
    crashes: int = 1
    leaves: int = 0
    failures: int = 1
    closes: int = 0
    heartbeat_timeout: float = 2.0
    last_call_timeout: float = 1.0
    join_timeout: float = 1000.0
    max_states: int = 2_000_000

    def config(self) -> RendezvousConfig:
        return RendezvousConfig(
            min_nodes=self.min_nodes,
            max_nodes=self.max_nodes,
            join_timeout=self.join_timeout,
            last_call_timeout=self.last_call_timeout,
            heartbeat_interval=1.0,
            heartbeat_timeout=self.heartbeat_timeout,
        )


class Phase(enum.Enum):
    IDLE = "idle"  # not started yet
    JOINING = "joining"
    TRAINING = "training"
    STOPPED = "stopped"  # crashed, left, failed or found the job closed


@frozen(kw_only=True)
class Node:
    name: str
    phase: Phase = Phase.IDLE
    join: JoinState = JoinState()
    pending: StoreOps | StoreWait | None = None
    world: RoundResult | None = None
    ring: LivenessTracker = LivenessTracker()
    last_round: int = -1


@frozen(kw_only=True)
class World:
    now: float = 0.0
    store: tuple[tuple[str, bytes], ...] = ()
    nodes: tuple[Node, ...] = ()
    used: tuple[tuple[str, int], ...] = ()
    results_at_close: frozenset[int] | None = None


@frozen(kw_only=True)
class Counterexample:
    invariant: str
    message: str
    events: tuple[Label, ...]


@frozen(kw_only=True)
class Exploration:
    """What the search found: how many states, and the first violation (None: all invariants
    hold on every reachable state within the bounds). ``complete`` is False when ``max_states``
    cut the search short."""

    states: int
    transitions: int
    deepest: int
    complete: bool
    counterexample: Counterexample | None
    rounds_reached: int = -1  # the highest round any node trained in, in any state


class Violation(Exception):
    def __init__(self, invariant: str, message: str) -> None:
        super().__init__(f"{invariant}: {message}")
        self.invariant, self.message = invariant, message


def explore(
    bounds: Bounds = Bounds(), step: StepFn = join.step, prefix: tuple[Label, ...] = ()
) -> Exploration:
    """Breadth-first search of every interleaving within ``bounds``; see the module docstring.

    ``prefix`` is a fixed sequence of events run first (e.g. :func:`formed_prefix`, which forms
    the first round): the search then covers every interleaving *after* it, which keeps bigger
    questions (a failure, a crash, a close in a formed world) within reach. Counterexample
    events include the prefix.

    Raises:
        Violation / ValueError: the prefix itself breaks an invariant or is not enabled.
    """
    config = bounds.config()
    start = replay(bounds, prefix, step)
    parents: dict[object, tuple[object, Label] | None] = {world_key(start): None}
    frontier: deque[tuple[World, object, int]] = deque([(start, world_key(start), 0)])
    transitions = deepest = 0
    reached = -1
    while frontier:
        world, key, depth = frontier.popleft()
        deepest = max(deepest, depth)
        reached = max([reached] + [n.last_round for n in world.nodes])
        for label in enabled(world, bounds):
            transitions += 1
            try:
                nxt = apply(world, label, config, step)
                check_invariants(nxt, config)
            except Violation as found:
                path = prefix + _path(parents, key) + (label,)
                example = Counterexample(
                    invariant=found.invariant, message=found.message, events=path
                )
                return Exploration(
                    states=len(parents),
                    transitions=transitions,
                    deepest=depth + 1,
                    complete=False,
                    counterexample=example,
                    rounds_reached=reached,
                )
            nkey = world_key(nxt)
            if nkey not in parents:
                parents[nkey] = (key, label)
                if len(parents) >= bounds.max_states:
                    return Exploration(
                        states=len(parents),
                        transitions=transitions,
                        deepest=deepest,
                        complete=False,
                        counterexample=None,
                        rounds_reached=reached,
                    )
                frontier.append((nxt, nkey, depth + 1))
    return Exploration(
        states=len(parents),
        transitions=transitions,
        deepest=deepest,
        complete=True,
        counterexample=None,
        rounds_reached=reached,
    )


def replay(bounds: Bounds, events: tuple[Label, ...], step: StepFn = join.step) -> World:
    """Re-run ``events`` from the initial world, checking invariants after each.

    Raises:
        Violation: the invariant the sequence breaks (as the explorer reported it).
        ValueError: an event that is not enabled where the sequence asks for it.
    """
    config = bounds.config()
    world = initial_world(bounds)
    for label in events:
        if label not in enabled(world, bounds):
            raise ValueError(f"event {label} is not enabled here")
        world = apply(world, label, config, step)
        check_invariants(world, config)
    return world


def formed_prefix(bounds: Bounds, step: StepFn = join.step) -> tuple[Label, ...]:
    """One fixed schedule that starts every node and forms the first round: nodes take turns,
    one event each, until all of them train (ticking time only when nobody can move)."""
    config = bounds.config()
    world = initial_world(bounds)
    events: list[Label] = []
    quiet = ("crash", "leave", "fail", "close", "watch", "tick")
    for _ in range(10_000):
        if all(n.phase is Phase.TRAINING for n in world.nodes):
            return tuple(events)
        moves = [e for e in enabled(world, bounds) if e[0] not in quiet]
        label = moves[0] if moves else ("tick", "")
        world = apply(world, label, config, step)
        events.append(label)
    raise ValueError(f"{bounds.nodes} nodes never formed a first round within {bounds}")


def _path(parents: Mapping[object, tuple[object, Label] | None], key: object) -> tuple[Label, ...]:
    labels: list[Label] = []
    link = parents[key]
    while link is not None:
        key, label = link
        labels.append(label)
        link = parents[key]
    return tuple(reversed(labels))


def initial_world(bounds: Bounds) -> World:
    return World(nodes=tuple(Node(name=f"n{i}") for i in range(bounds.nodes)))


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
    return _count(out, kind) if kind in ("crash", "leave", "fail", "close") else out


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
            node, phase=Phase.TRAINING, world=result, last_round=result.round_no, pending=None
        )

    def begin(self, node: Node, reason: str, from_round: int | None) -> Node:
        node = evolve(
            node, phase=Phase.JOINING, world=None, ring=LivenessTracker(), join=JoinState()
        )
        event = JoinRequested(
            run_id=KEYS.run_id,
            node=node.name,
            now=self.world.now,
            from_round=from_round,
            reason=reason,
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


def _close(ctx: _Ctx, node: Node) -> Node:
    assert node.world is not None
    ctx.run(membership.close_ops(KEYS, node.world.round_no + 1, "succeeded", f"by {node.name}"))
    done = frozenset(r for r, res in _results(ctx.store).items() if not res.closed)
    ctx.world = evolve(ctx.world, results_at_close=done)
    return node


def _watch(ctx: _Ctx, node: Node) -> Node:
    world = node.world
    assert world is not None
    seen = membership.read_watch(ctx.run(membership.watch_ops(KEYS, world.round_no)))
    if seen.closed is not None:
        return evolve(node, phase=Phase.STOPPED, world=None)
    if seen.next_opened is not None:
        return ctx.begin(node, "rejoin", world.round_no)
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


# --- invariants --------------------------------------------------------------------------------


# The same few records are decoded in every state: remember them (records are immutable).
_DECODED: dict[bytes, Any] = {}


def _decoded(raw: bytes, decode: Callable[[bytes], Any]) -> Any:
    value = _DECODED.get(raw)
    if value is None:
        if len(_DECODED) > 50_000:
            _DECODED.clear()
        value = _DECODED[raw] = decode(raw)
    return value


def _results(store: Mapping[str, bytes]) -> dict[int, RoundResult]:
    found = {}
    for key, raw in store.items():
        if key.endswith("/result"):
            result: RoundResult = _decoded(raw, decode_result)
            found[result.round_no] = result
    return found


def check_invariants(world: World, config: RendezvousConfig) -> None:
    """Raise :class:`Violation` naming the first of R1, R3-R7 that ``world`` breaks."""
    store = dict(world.store)
    results = _results(store)
    training = [n for n in world.nodes if n.phase is Phase.TRAINING and n.world is not None]
    for node in training:
        assert node.world is not None
        stored = results.get(node.world.round_no)
        if stored != node.world or stored.rank_of(node.name) is None:
            raise Violation("R1", f"{node.name} holds a result the store does not")
        prefix = KEYS.round_prefix(node.world.round_no + 1) + "/slot/"
        waiting = {_decoded(v, decode_node).node for k, v in store.items() if k.startswith(prefix)}
        if node.name in waiting:
            raise Violation(
                "R3", f"{node.name} trains in {node.world.round_no} and waits in the next"
            )
    for result in results.values():
        if not result.closed and not config.min_nodes <= result.world_size <= config.max_nodes:
            raise Violation("R4", f"round {result.round_no} has {result.world_size} nodes")
    if world.results_at_close is not None:
        now = frozenset(r for r, res in results.items() if not res.closed)
        if now != world.results_at_close:
            raise Violation(
                "R5", f"rounds {sorted(now - world.results_at_close)} completed after the close"
            )
    if (KEYS.closed() in store) != (dict(world.used).get("close", 0) > 0):
        raise Violation("R6", "the rendezvous closed without an explicit close")
    rounds = {n.world.round_no for n in training if n.world is not None}
    if len(rounds) > 1:
        raise Violation("R7", f"rounds {sorted(rounds)} train side by side")


# --- canonical form ----------------------------------------------------------------------------

# Every field of a join state is hashable except the liveness tracker's mapping.
_JOIN_FIELDS = tuple(a.name for a in attrs.fields(JoinState) if a.name != "liveness")


def _node_key(node: Node) -> object:
    state = node.join
    return (
        node.name,
        node.phase,
        tuple(getattr(state, f) for f in _JOIN_FIELDS),
        tuple(sorted(state.liveness.seen.items())),
        node.pending,
        node.world,
        tuple(sorted(node.ring.seen.items())),
        node.last_round,
    )


def world_key(world: World) -> object:
    """The canonical hashable form of a world: equal worlds give equal keys, so the search
    visits each state once."""
    nodes = tuple(_node_key(n) for n in world.nodes)
    return (world.now, world.store, world.used, world.results_at_close, nodes)
