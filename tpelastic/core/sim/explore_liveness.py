"""Liveness by exhaustion: from every reachable state, once the faults stop, the run ends well.

:func:`explore_liveness` walks every state the explorer reaches within ``bounds`` (the same
events, bounds and safety checks as :func:`~tpelastic.core.sim.explore.explore`) and, from each,
runs one fair continuation without faults: first every paused node and a paused store resume
(the store answers again), then in turns every node takes its next step (a start, a store
delivery, a wake-up or expiry, a held write landing, the exit barrier, a held failure's timer,
its workers finishing once every node that is up trains in one full world, a look), then time
ticks (beyond ``bounds.ticks``: the faults are over, time is not). The continuation must reach,
within ``rotations`` turns, a terminal state: every node's process gone (it crashed, or its
agent ended). The give-ups on the way are judged on every transition (``S6``: never with the
job able to go on), so a terminal state reached is a success, a budget-spent failure, or the
end that a store gone for good leaves. A state is not judged when fewer than ``min_nodes``
nodes are up and the store is not gone: nothing can go on there, and a join waits out its
join timeout.

The shallowest state from which the run cannot end (a hang: no step left but none is terminal,
or a livelock) is reported with the events that reach it and the continuation's events, so
both replay (:func:`replay_stall`).

The continuation is deterministic, so a state it passes on the way to an end ends too: those
are remembered (up to a shift of every instant: the core compares instants only with each
other, so two states that differ by a constant time shift run the same continuation).
"""

from __future__ import annotations

import attrs
from attrs import evolve, frozen

from tpelastic.core import agent as ag
from tpelastic.core.node import node_step
from tpelastic.core.rendezvous import join
from tpelastic.core.rendezvous.liveness import LivenessTracker
from tpelastic.core.rendezvous.ops import StoreWait
from tpelastic.core.rendezvous.state import JoinState
from tpelastic.core.sim.explore import Counterexample, explore, path_to, replay
from tpelastic.core.sim.explore_events import ENDS_OF_FAULTS, FAULTS, apply, enabled
from tpelastic.core.sim.explore_model import (
    Bounds,
    CoreFn,
    Label,
    Node,
    Phase,
    StepFn,
    StoreState,
    Violation,
    World,
    check_invariants,
)

_STEPS: tuple[str, ...] = ("start", "resume", "send", "deliver", "wake", "expire", "lost")
_STEPS += ("barrier", "timer", "finish", "look")
_UNBOUNDED = 10**9


@frozen(kw_only=True)
class Stall:
    """A reachable state from which the fair continuation did not end the run (or broke an
    invariant on the way: ``invariant``)."""

    events: tuple[Label, ...]
    detail: str
    continuation: tuple[Label, ...] = ()
    invariant: str = "S5"


@frozen(kw_only=True)
class LivenessExploration:
    states: int
    complete: bool
    stall: Stall | None


def calm(bounds: Bounds) -> Bounds:
    """The bounds of a continuation: no new fault, unbounded time, workers may finish."""
    return evolve(
        bounds,
        ticks=_UNBOUNDED,
        finishes=_UNBOUNDED,
        crashes=0,
        leaves=0,
        failures=0,
        pauses=0,
        store_pauses=0,
        host_deaths=0,
        delays=0,
        cuts=0,
    )


def _up(world: World) -> list[Node]:
    return [n for n in world.nodes if n.phase in (Phase.IDLE, Phase.UP)]


def judged(world: World, bounds: Bounds) -> bool:
    """Must the run end from here: enough nodes are up, or the store is gone for good?"""
    return world.store_state is StoreState.GONE or len(_up(world)) >= bounds.min_nodes


def terminal(world: World) -> bool:
    return all(n.phase in (Phase.DOWN, Phase.ENDED) for n in world.nodes)


def settled(world: World, bounds: Bounds) -> bool:
    """Every node that is up trains in one full world of min(up, max_nodes) nodes, all in the
    same attempt, or has finished and waits at its exit barrier (or too few are up to form
    one)."""
    up = _up(world)
    if len(up) < bounds.min_nodes:
        return True
    wanted = min(len(up), bounds.max_nodes)
    done = [n for n in up if n.agent.phase is ag.AgentPhase.EXIT_BARRIER]
    training = [n for n in up if n.training] + done
    runs = {(n.world.round_no, n.workers) for n in training if n.world is not None}
    runs -= {(n.world.round_no, None) for n in done if n.world is not None}
    if len(runs) != 1 or len(training) != wanted:
        return False
    return all(n.world is not None and n.world.world_size == wanted for n in training)


def continue_fairly(
    world: World,
    bounds: Bounds,
    step: StepFn,
    core: CoreFn,
    rotations: int,
    good: set[object],
    labels: list[Label],
    bad: set[object] | None = None,
) -> World | None:
    """Run the fault-free fair continuation, appending its events to ``labels``; None when
    the run ended (or is not judged), else the world where it gave up.

    ``good`` holds the keys of states whose continuation ended; every state passed on the way
    to an end is added. ``bad``, when given, holds those of states whose continuation did not
    end, likewise.

    Raises:
        Violation: an invariant broke on the way.
    """
    quiet = calm(bounds)
    config = bounds.config()

    def take(label: Label) -> None:
        nonlocal world
        labels.append(label)
        world = apply(world, label, quiet, step, core)
        check_invariants(world, config)

    ends = [e for e in enabled(world, quiet) if e[0] in ENDS_OF_FAULTS]
    while ends:
        take(ends[0])
        ends = [e for e in enabled(world, quiet) if e[0] in ENDS_OF_FAULTS]
    if not judged(world, bounds):
        return None
    passed: list[object] = []
    for _ in range(rotations):
        key = shifted_key(world)
        if key in good or terminal(world):
            good.update(passed)
            return None
        if bad is not None and key in bad:
            bad.update(passed)
            return world
        passed.append(key)
        for index in range(len(world.nodes)):
            name = world.nodes[index].name
            mine = {e[0] for e in enabled(world, quiet) if e[1] == name}
            if "finish" in mine and not settled(world, bounds):
                mine.discard("finish")
            for kind in _STEPS:
                if kind in mine:
                    take((kind, name))
                    break
        take(("tick", ""))
    if terminal(world):
        good.update(passed)
        return None
    if bad is not None:
        bad.update(passed)
    return world


def describe(world: World) -> str:
    """One word per node: where it is stuck."""
    words = []
    for node in world.nodes:
        if node.phase is not Phase.UP:
            code = node.agent.exit_code
            words.append(f"{node.name}={node.phase.value}" + (f"(exit {code})" if code else ""))
            continue
        phase = node.agent.phase
        if phase is ag.AgentPhase.RENDEZVOUS or phase is ag.AgentPhase.INIT:
            word = "joining"
        elif node.training and node.world is not None:
            word = f"training@r{node.world.round_no}/{node.world.world_size}"
        else:
            word = phase.value.lower()
        if node.outbox is not None:
            word += "+writing"
        words.append(f"{node.name}={word}")
    return ", ".join(words) + f"; store {world.store_state.value}, t={world.now:g}"


def shifted_key(world: World) -> object:
    """The state's key with every instant taken relative to ``now`` and the fault counts left
    out (neither changes a fault-free continuation)."""
    by = world.now
    nodes = tuple(_shifted_node(n, by) for n in world.nodes)
    return (world.store, world.store_state, world.results_at_close, world.closed_by, nodes)


# The instants a node's state holds, by field (every other field is a plain value).
_JOIN_TIMES = ("deadline", "follow_until", "min_reached_at", "unwritten_since")
_JOIN_PLAIN = tuple(
    f.name for f in attrs.fields(JoinState) if f.name not in (*_JOIN_TIMES, "liveness")
)
_AGENT_PLAIN = tuple(
    f.name for f in attrs.fields(ag.AgentState) if f.name not in ("held_until", "attempt_starts")
)


def _at(instant: float | None, by: float) -> float | None:
    return None if instant is None else instant - by


def _sightings(tracker: LivenessTracker, by: float) -> object:
    return tuple(sorted((k, s.counter, s.since - by) for k, s in tracker.seen.items()))


def _shifted_node(node: Node, by: float) -> object:
    join, agent, pending, outage = node.join, node.agent, node.pending, node.outage
    return (
        node.name,
        node.phase,
        tuple(getattr(agent, f) for f in _AGENT_PLAIN),
        _at(agent.held_until, by),
        tuple((attempt, at - by) for attempt, at in agent.attempt_starts),
        node.core.member,
        tuple(getattr(join, f) for f in _JOIN_PLAIN),
        tuple(_at(getattr(join, f), by) for f in _JOIN_TIMES),
        _sightings(join.liveness, by),
        (pending.keys, pending.deadline - by) if isinstance(pending, StoreWait) else pending,
        node.world,
        node.workers,
        node.attempt,
        _sightings(node.ring, by),
        node.last_beat - by,
        node.paused,
        node.delayed,
        _at(node.late_beat, by),
        (outage.kind, outage.since - by, outage.deadline - by) if outage is not None else None,
        node.lost,
        node.outbox,
    )


def explore_liveness(
    bounds: Bounds,
    prefix: tuple[Label, ...] = (),
    step: StepFn = join.step,
    rotations: int = 60,
    core: CoreFn = node_step,
) -> LivenessExploration:
    """Check every state reachable after ``prefix`` within ``bounds``: the safety invariants,
    and that the run can end from it (see the module docstring).

    A state can end when one of its fault-free transitions leads to a state that can (the
    states are decided deepest first), or when it is terminal; only a state with no such
    transition decided runs the fair continuation, whose states that end are remembered.
    """
    worlds: dict[object, World] = {}
    order: list[object] = []
    parents: dict[object, tuple[object, Label] | None] = {}
    onward: dict[object, list[object]] = {}

    def on_state(key: object, world: World) -> None:
        worlds[key] = world
        order.append(key)
        parents.setdefault(key, None)

    def on_edge(key: object, label: Label, nkey: object) -> None:
        if nkey not in parents:
            parents[nkey] = (key, label)
        if label[0] not in FAULTS:
            onward.setdefault(key, []).append(nkey)

    found = explore(bounds, step, prefix, core, on_state=on_state, on_edge=on_edge)
    if found.counterexample is not None:
        return LivenessExploration(
            states=found.states, complete=False, stall=_stall(found.counterexample)
        )
    ends: set[object] = set()
    remembered: set[object] = set()
    hopeless: set[object] = set()
    stalls: dict[int, Stall] = {}
    for index in range(len(order) - 1, -1, -1):
        key = order[index]
        world = worlds[key]
        if terminal(world) or any(n in ends for n in onward.get(key, ())):
            ends.add(key)
            continue
        if not judged(world, bounds):
            continue
        labels: list[Label] = []
        try:
            stuck = continue_fairly(
                world, bounds, step, core, rotations, remembered, labels, hopeless
            )
        except Violation as violation:
            example = Counterexample(
                invariant=violation.invariant,
                message=violation.message,
                events=prefix + path_to(parents, key),
                continuation=tuple(labels),
            )
            return LivenessExploration(states=found.states, complete=False, stall=_stall(example))
        if stuck is not None:
            stalls[index] = Stall(
                events=prefix + path_to(parents, key),
                detail=f"no end within {rotations} turns: {describe(stuck)}",
                continuation=tuple(labels),
            )
        else:
            ends.add(key)
    if stalls:  # the shallowest: the shortest story
        return LivenessExploration(states=found.states, complete=False, stall=stalls[min(stalls)])
    return LivenessExploration(states=found.states, complete=found.complete, stall=None)


def _stall(example: Counterexample) -> Stall:
    return Stall(
        events=example.events,
        detail=example.message,
        continuation=example.continuation,
        invariant=example.invariant,
    )


def replay_stall(
    bounds: Bounds, stall: Stall, step: StepFn = join.step, core: CoreFn = node_step
) -> World:
    """Replay a stall: its events within ``bounds``, then its continuation (fault-free, time
    unbounded). Returns where the continuation ends (or raises the Violation it broke)."""
    reached = replay(bounds, stall.events, step, core)
    return replay(calm(bounds), stall.continuation, step, core, start=reached)


__all__ = [
    "LivenessExploration",
    "Stall",
    "calm",
    "continue_fairly",
    "describe",
    "explore_liveness",
    "judged",
    "replay_stall",
    "settled",
    "shifted_key",
    "terminal",
]
