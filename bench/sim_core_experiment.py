"""An experiment, not shipped code: what three proposed changes to tpelastic/core/rendezvous/
would buy the simulator. ``bench/sim_scale.py --proposed-core`` installs them in its own process.

The rendezvous core belongs to another area, so the changes are measured here first and proposed
in docs/benchmarks-sim.md; each keeps the machine's behaviour exactly (same rows, same verdicts):

1. ``liveness``: the closer's ``_pending_after`` records all its sightings in one dict and builds
   one ``LivenessTracker`` at the end. Today each ``observe`` copies the whole map, which is
   O(N) per member and O(N^2) per look at the previous round's members.
2. ``one-verdict``: a step reads its replies once. Today each guard of a (phase, event) pair
   calls the same reader (``read_status``, ``read_probe``...), and the action calls it again:
   up to six O(N) readings of the same replies per closer step. Here a one-entry memo keyed by
   the identity of (state, event, config), which are immutable values, stands in for that.
3. ``encode-once``: ``_won_publish`` encodes the closer's O(N) draft once per step, not once
   per guard (same one-entry memo on ``encode_result``).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from tpelastic.core.rendezvous import join, liveness, reading

PROPOSALS = ("liveness", "one-verdict", "encode-once")


def _memo_last(function: Callable[..., Any]) -> Callable[..., Any]:
    """Remember the last call, keyed by the identity of its arguments (all immutable values);
    the arguments are kept alive with the answer, so an id cannot be reused meanwhile."""
    last: list[Any] = [None, None]

    def remembered(*args: Any) -> Any:
        key = last[0]
        if key is not None and len(key) == len(args) and all(map(_same, key, args)):
            return last[1]
        answer = function(*args)
        last[0], last[1] = args, answer
        return answer

    remembered.__name__ = function.__name__
    return remembered


def _same(a: object, b: object) -> bool:
    return a is b


def _pending_after_batched(state: Any, raws: Any, now: float, config: Any) -> Any:
    """reading._pending_after with one tracker built at the end (same answers)."""
    previous = state.previous
    tracker = state.liveness
    seen = dict(tracker.seen)
    changed = False
    still: list[int] = []
    dead: set[str] = set()
    for index, rank in enumerate(reading.expected_members(state)):
        arrived, gone, beat = raws[3 * index : 3 * index + 3]
        if arrived is not None or gone is not None or previous is None:
            continue
        node = previous.participants[rank].node
        if config.leased_liveness:  # an absent leased key is a dead node; nothing is timed
            if beat is None:
                dead.add(node)
            else:
                still.append(rank)
            continue
        counter = reading.decode_counter(beat)
        old = seen.get(node)
        if old is None or old.counter != counter:
            old = seen[node] = liveness.Sighting(counter=counter, since=now)
            changed = True
        if now - old.since >= config.heartbeat_timeout:
            dead.add(node)
        else:
            still.append(rank)
    if changed:
        tracker = liveness.LivenessTracker(seen=seen)
    return tuple(still), dead, tracker


def install(which: tuple[str, ...] = PROPOSALS) -> None:
    """Patch the rendezvous core of this process with the chosen proposals.

    Raises:
        RuntimeError: the core no longer has what a proposal replaces (it changed since this
            experiment was written), so the measurement would silently measure nothing.
    """
    if "liveness" in which:
        _require(reading, "_pending_after")
        reading._pending_after = _pending_after_batched  # type: ignore[assignment]
    if "one-verdict" in which:
        wrappers: dict[object, Callable[..., Any]] = {}
        for name in (
            "read_location",
            "read_probe",
            "read_status",
            "read_collection",
            "read_result",
        ):
            original = _require(reading, name)
            wrappers[original] = _memo_last(original)
            setattr(reading, name, wrappers[original])
        swapped = sum(
            _swap_cells(f, wrappers) for f in (*join.GUARDS.values(), *join.ACTIONS.values())
        )
        if swapped == 0:
            raise RuntimeError("no guard or action of the join table holds a reader any more")
    if "encode-once" in which:
        join.encode_result = _memo_last(_require(join, "encode_result"))  # type: ignore[assignment]


def _require(module: types.ModuleType, name: str) -> Any:
    if not hasattr(module, name):
        raise RuntimeError(f"{module.__name__}.{name} is gone: update bench/sim_core_experiment.py")
    return getattr(module, name)


def _swap_cells(function: object, wrappers: dict[object, Callable[..., Any]]) -> int:
    """Guards and actions made by factories hold their reader in a closure cell; returns how
    many cells now hold a wrapper."""
    if not isinstance(function, types.FunctionType) or function.__closure__ is None:
        return 0
    swapped = 0
    for cell in function.__closure__:
        try:
            content = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(content, types.FunctionType) and content in wrappers:
            cell.cell_contents = wrappers[content]
            swapped += 1
    return swapped
