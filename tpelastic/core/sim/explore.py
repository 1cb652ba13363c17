"""Exhaustive checking: every interleaving of a bounded set of events, breadth first.

For a small configuration (say 3 nodes, min 2) the explorer enumerates every order in which the
nodes' store batches land, waits wake or expire, members look, time ticks, and a bounded number
of faults happen: crashes, graceful leaves, worker failures and successes, pauses of a node (its
timers fire late, its clock jumps), pauses of the store, one node cut off from the store while
it serves the others, the death of the store-hosting node, and late heartbeats. Every node steps
the product's core: the composed ``node_step`` (agent table, restart budget, membership machine)
and the join machine (``step``), or any functions with their signatures (a deliberately broken
table in a test). Every reachable state is checked against the safety invariants R1, R3-R7, R16
and R17 of ``specs/rendezvous_join.md`` (R2, and S6 of ``specs/simulation.md``, on every
transition); states are deduplicated by a canonical hashable form.
:mod:`tpelastic.core.sim.explore_liveness` adds the liveness check.

The abstraction: a store batch is atomic and lands when the explorer delivers it (any order
across nodes, in order per node); time moves in steps of ``heartbeat_interval`` (``tick``): each
tick lands the heartbeat of every running node (unless its process or the store is paused, or
the beat is late) and every running member then reads its keep-alive, so a node whose beats
stop fences itself before a peer can find it dead. A wait may end early when its keys exist
(``wake``) or once its deadline has passed (``expire``). The events are in
:mod:`tpelastic.core.sim.explore_events`.

Breadth-first search finds a shortest event sequence to any violation: the counterexample is
minimal in length and replays with :func:`replay`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping

from attrs import frozen

from tpelastic.core.node import node_step
from tpelastic.core.rendezvous import join
from tpelastic.core.sim.explore_events import apply, enabled
from tpelastic.core.sim.explore_model import (
    Bounds,
    CoreFn,
    Interner,
    Label,
    Node,
    Phase,
    StepFn,
    StoreState,
    Violation,
    World,
    check_invariants,
    initial_world,
    world_key,
)

DEFAULT_BOUNDS = Bounds()

# One fault after a formed first round (``formed_prefix``), with time enough for it to matter:
# 3 nodes, min 2, every interleaving. Sized for CI (each a few seconds on a quiet 2-core
# machine); ``SLOW_FAULT_BOUNDS`` let more time pass and combines faults (bench/explore.py).
FAULT_BOUNDS: dict[str, Bounds] = {
    "crash": Bounds(ticks=1, crashes=1, failures=0),
    "worker failure": Bounds(ticks=0, failures=1, crashes=0),
    "worker failure, restarted in place": Bounds(
        ticks=1, failures=1, crashes=0, restart_in_place=True
    ),
    "graceful leave": Bounds(ticks=0, leaves=1, crashes=0, failures=0),
    "pause of a node": Bounds(ticks=1, pauses=1, crashes=0, failures=0),
    "pause of the store host": Bounds(ticks=1, pauses=1, store_host=True, crashes=0, failures=0),
    "store pause": Bounds(ticks=1, store_pauses=1, crashes=0, failures=0),
    "death of the store host": Bounds(
        ticks=1, host_deaths=1, store_host=True, crashes=0, failures=0
    ),
    "late heartbeat": Bounds(ticks=1, delays=1, crashes=0, failures=0),
    "one node cut off from the store": Bounds(ticks=1, cuts=1, crashes=0, failures=0),
    "workers succeed": Bounds(ticks=1, finishes=1, crashes=0, failures=0),
}
SLOW_FAULT_BOUNDS: dict[str, Bounds] = {
    "crash": Bounds(ticks=4, crashes=1, failures=0),
    "worker failure": Bounds(ticks=1, failures=1, crashes=0),
    "worker failure, restarted in place": Bounds(
        ticks=2, failures=2, crashes=0, restart_in_place=True, max_restarts=1
    ),
    "graceful leave": Bounds(ticks=1, leaves=1, crashes=0, failures=0),
    "pause of a node": Bounds(ticks=4, pauses=1, crashes=0, failures=0),
    "pause of the store host": Bounds(ticks=4, pauses=1, store_host=True, crashes=0, failures=0),
    "store pause": Bounds(ticks=4, store_pauses=1, crashes=0, failures=0),
    "death of the store host": Bounds(
        ticks=3, host_deaths=1, store_host=True, crashes=0, failures=0
    ),
    "late heartbeat": Bounds(ticks=4, delays=2, crashes=0, failures=0),
    "workers succeed": Bounds(ticks=2, finishes=2, crashes=0, failures=0),
    "pause, then a crash": Bounds(ticks=3, pauses=1, crashes=1, failures=0),
    "store pause, then a worker failure": Bounds(
        ticks=2, store_pauses=1, failures=1, crashes=0, restart_in_place=True
    ),
    "one node cut off from the store": Bounds(ticks=3, cuts=1, crashes=0, failures=0),
    "a cut-off node's worker failure, restarted in place": Bounds(
        ticks=2, cuts=1, failures=1, crashes=0, restart_in_place=True
    ),
}

__all__ = [
    "FAULT_BOUNDS",
    "SLOW_FAULT_BOUNDS",
    "Bounds",
    "Counterexample",
    "Exploration",
    "Label",
    "Node",
    "Phase",
    "StoreState",
    "Violation",
    "World",
    "explore",
    "formed_prefix",
    "path_to",
    "replay",
]


@frozen(kw_only=True)
class Counterexample:
    """``events`` replay (:func:`replay`) to the violation; for a liveness failure they reach
    the state whose fault-free continuation (``continuation``) does not end the run."""

    invariant: str
    message: str
    events: tuple[Label, ...]
    continuation: tuple[Label, ...] = ()


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


# Told of every state (its key and world) and every transition (key, label, next key).
OnState = Callable[[object, World], None]
OnEdge = Callable[[object, Label, object], None]


def explore(
    bounds: Bounds = DEFAULT_BOUNDS,
    step: StepFn = join.step,
    prefix: tuple[Label, ...] = (),
    core: CoreFn = node_step,
    on_state: OnState | None = None,
    on_edge: OnEdge | None = None,
) -> Exploration:
    """Breadth-first search of every interleaving within ``bounds``; see the module docstring.

    ``prefix`` is a fixed sequence of events run first (e.g. :func:`formed_prefix`, which forms
    the first round): the search then covers every interleaving *after* it, which keeps bigger
    questions (a fault in a formed world) within reach. Counterexample events include the
    prefix. ``on_state`` and ``on_edge`` are told of the graph as it is found (the liveness
    check builds on it).

    Raises:
        Violation / ValueError: the prefix itself breaks an invariant or is not enabled.
    """
    start = replay(bounds, prefix, step, core)
    interner = Interner()
    first = world_key(start, interner)
    parents: dict[object, tuple[object, Label] | None] = {first: None}
    frontier: deque[tuple[World, object, int]] = deque([(start, first, 0)])
    transitions = deepest = 0
    reached = -1

    def found(example: Counterexample, depth: int) -> Exploration:
        return Exploration(
            states=len(parents),
            transitions=transitions,
            deepest=depth,
            complete=False,
            counterexample=example,
            rounds_reached=reached,
        )

    while frontier:
        world, key, depth = frontier.popleft()
        deepest = max(deepest, depth)
        reached = max([reached] + [n.agent.round for n in world.nodes if n.training])
        if on_state is not None:
            on_state(key, world)
        for label in enabled(world, bounds):
            transitions += 1
            try:
                nxt = apply(world, label, bounds, step, core)
                check_invariants(nxt, bounds.config())
            except Violation as violation:
                path = prefix + path_to(parents, key) + (label,)
                example = Counterexample(
                    invariant=violation.invariant, message=violation.message, events=path
                )
                return found(example, depth + 1)
            nkey = world_key(nxt, interner)
            if on_edge is not None:
                on_edge(key, label, nkey)
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


def replay(
    bounds: Bounds,
    events: tuple[Label, ...],
    step: StepFn = join.step,
    core: CoreFn = node_step,
    start: World | None = None,
) -> World:
    """Re-run ``events`` from the initial world (or ``start``), checking invariants after each.

    Raises:
        Violation: the invariant the sequence breaks (as the explorer reported it).
        ValueError: an event that is not enabled where the sequence asks for it.
    """
    config = bounds.config()
    world = initial_world(bounds) if start is None else start
    for label in events:
        if label not in enabled(world, bounds):
            raise ValueError(f"event {label} is not enabled here")
        world = apply(world, label, bounds, step, core)
        check_invariants(world, config)
    return world


_FORMING = frozenset({"start", "deliver", "wake", "expire"})


def formed_prefix(
    bounds: Bounds, step: StepFn = join.step, core: CoreFn = node_step
) -> tuple[Label, ...]:
    """One fixed schedule that starts every node and forms the first round: nodes take turns,
    one event each, until all of them train (ticking time only when nobody can move)."""
    world = initial_world(bounds)
    events: list[Label] = []
    for _ in range(10_000):
        if all(n.training for n in world.nodes):
            return tuple(events)
        moves = [e for e in enabled(world, bounds) if e[0] in _FORMING]
        label = moves[0] if moves else ("tick", "")
        world = apply(world, label, bounds, step, core)
        events.append(label)
    raise ValueError(f"{bounds.nodes} nodes never formed a first round within {bounds}")


def path_to(
    parents: Mapping[object, tuple[object, Label] | None], key: object
) -> tuple[Label, ...]:
    labels: list[Label] = []
    link = parents[key]
    while link is not None:
        key, label = link
        labels.append(label)
        link = parents[key]
    return tuple(reversed(labels))
