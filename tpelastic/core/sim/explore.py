"""Exhaustive checking: every interleaving of a bounded set of events, breadth first.

For a small configuration (say 3 nodes, min 2) the explorer enumerates every order in which the
nodes' individual store batches can land, waits can wake or expire, time can tick, and a bounded
number of starts, crashes, graceful leaves, worker failures (re-joining, or restarted in place
as the round's next attempt) and closes can happen. Each node runs the real join machine (or any
``step`` function with its signature, e.g. a deliberately broken table in a test). Every
reachable state is checked against the safety invariants R1, R3-R7, R16 and R17 of
``specs/rendezvous_join.md`` (R2 on every transition); states are deduplicated by a canonical
hashable form.

The abstraction: a store batch is atomic and lands when the explorer delivers it (any order
across nodes, in order per node); time moves in steps of ``heartbeat_interval`` (``tick``), and
each tick bumps the heartbeat counter of every node still running, so a node is found dead
exactly when it stopped (crashed, left or failed) and enough ticks passed. A wait may end early
when its keys exist (``wake``) or once its deadline has passed (``expire``).

Breadth-first search finds a shortest event sequence to any violation: the counterexample is
minimal in length and replays with :func:`replay`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from attrs import frozen

from tpelastic.core.rendezvous import join
from tpelastic.core.sim.explore_events import apply, enabled
from tpelastic.core.sim.explore_model import (
    Bounds,
    Label,
    Node,
    Phase,
    StepFn,
    Violation,
    World,
    check_invariants,
    initial_world,
    world_key,
)

DEFAULT_BOUNDS = Bounds()

__all__ = [
    "Bounds",
    "Counterexample",
    "Exploration",
    "Label",
    "Node",
    "Phase",
    "Violation",
    "World",
    "explore",
    "formed_prefix",
    "replay",
]


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


def explore(
    bounds: Bounds = DEFAULT_BOUNDS, step: StepFn = join.step, prefix: tuple[Label, ...] = ()
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
