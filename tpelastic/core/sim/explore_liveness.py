"""Liveness by exhaustion: from every reachable state, faults stopping there, the run settles.

:func:`explore_liveness` walks every state the explorer reaches within ``bounds`` (the same
events and bounds as :func:`~tpelastic.core.sim.explore.explore`) and, from each, runs one fair
continuation without faults: every node in turn takes its next store delivery, wake-up, expiry,
start or look, then time ticks (beyond ``bounds.ticks``: the faults are over, time is not). The
continuation must reach, within ``rotations`` turns, a state in which every node still running
trains in one round of ``min(running, max_nodes)`` nodes (unless fewer than ``min_nodes`` run:
then nothing can go on and the state is not judged). The first state that does not settle is
reported with the events that reach it, so it replays with
:func:`~tpelastic.core.sim.explore.replay`.
"""

from __future__ import annotations

from collections import deque

from attrs import frozen

from tpelastic.core.rendezvous import join
from tpelastic.core.sim.explore import _path, replay
from tpelastic.core.sim.explore_events import apply, enabled
from tpelastic.core.sim.explore_model import Bounds, Label, Phase, StepFn, World, world_key

_PROGRESS = frozenset({"start", "deliver", "wake", "expire", "watch"})


@frozen(kw_only=True)
class Stall:
    """A reachable state from which the fair continuation did not settle."""

    events: tuple[Label, ...]
    detail: str


@frozen(kw_only=True)
class LivenessExploration:
    states: int
    complete: bool
    stall: Stall | None


def settled(world: World, bounds: Bounds) -> bool:
    """Every running node trains in one round of min(running, max_nodes) nodes (or too few run)."""
    running = [n for n in world.nodes if n.phase is not Phase.STOPPED]
    if len(running) < bounds.min_nodes:
        return True
    training = [n for n in running if n.phase is Phase.TRAINING and n.world is not None]
    rounds = {n.world.round_no for n in training if n.world is not None}
    wanted = min(len(running), bounds.max_nodes)
    if len(rounds) != 1 or len(training) != wanted:
        return False
    return all(n.world is not None and n.world.world_size == wanted for n in training)


def continue_fairly(
    world: World, bounds: Bounds, step: StepFn, rotations: int, good: set[object] | None = None
) -> World | None:
    """Run the fault-free fair continuation; None when it settled, else where it ended.

    ``good`` holds the keys of states (at rotation boundaries) whose continuation settles: the
    continuation is deterministic, so reaching one settles this one too; every state passed on
    the way is added when it settles.
    """
    config = bounds.config()
    known = good if good is not None else set()
    passed: list[object] = []
    for _ in range(rotations):
        key = _continuation_key(world)
        if key in known or settled(world, bounds):
            known.update(passed)
            return None
        passed.append(key)
        for node in world.nodes:
            for label in enabled(world, bounds):
                if label[1] == node.name and label[0] in _PROGRESS:
                    world = apply(world, label, config, step)
                    break
        world = apply(world, ("tick", ""), config, step)
    if settled(world, bounds):
        known.update(passed)
        return None
    return world


def _continuation_key(world: World) -> object:
    # The fault budget spent does not change a fault-free continuation, and neither does the
    # tick count beyond it: leave both out so converging continuations meet.
    key = world_key(world)
    assert isinstance(key, tuple)
    return (key[0], key[1], key[3], key[4])


def explore_liveness(
    bounds: Bounds,
    prefix: tuple[Label, ...] = (),
    step: StepFn = join.step,
    rotations: int = 60,
) -> LivenessExploration:
    """Check the fair continuation of every state reachable after ``prefix`` within ``bounds``."""
    config = bounds.config()
    start = replay(bounds, prefix, step)
    parents: dict[object, tuple[object, Label] | None] = {world_key(start): None}
    frontier: deque[tuple[World, object]] = deque([(start, world_key(start))])
    good: set[object] = set()
    while frontier:
        world, key = frontier.popleft()
        stuck = continue_fairly(world, bounds, step, rotations, good)
        if stuck is not None:
            phases = ", ".join(
                f"{n.name}={n.phase.value}"
                + (f"@r{n.world.round_no}/{n.world.world_size}" if n.world else "")
                for n in stuck.nodes
            )
            return LivenessExploration(
                states=len(parents),
                complete=False,
                stall=Stall(events=prefix + _path(parents, key), detail=phases),
            )
        for label in enabled(world, bounds):
            nxt = apply(world, label, config, step)
            nkey = world_key(nxt)
            if nkey not in parents:
                parents[nkey] = (key, label)
                if len(parents) >= bounds.max_states:
                    return LivenessExploration(states=len(parents), complete=False, stall=None)
                frontier.append((nxt, nkey))
    return LivenessExploration(states=len(parents), complete=True, stall=None)


__all__ = ["LivenessExploration", "Stall", "continue_fairly", "explore_liveness", "settled"]
