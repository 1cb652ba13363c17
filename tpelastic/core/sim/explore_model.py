"""The explorer's model: bounds, the world it searches (nodes, store, clock), the invariants
R1, R3-R7, R16 and R17 checked on every world, and the canonical key that deduplicates worlds."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from attrs import frozen

from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.liveness import LivenessTracker
from tpelastic.core.rendezvous.ops import (
    StoreOps,
    StoreWait,
)
from tpelastic.core.rendezvous.records import (
    RoundResult,
    decode_node,
    decode_result,
)
from tpelastic.core.rendezvous.state import JoinState
from tpelastic.core.table import Step

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
    # Worker failures restarted in place (the node opens its round's next attempt); ``failures``
    # are worker failures that re-join instead (a rendezvous without attempts).
    restarts: int = 0
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
    # The in-place attempt of ``last_round`` it runs (or ran last): it reports it when it joins.
    attempt: int = 0


@frozen(kw_only=True)
class World:
    now: float = 0.0
    store: tuple[tuple[str, bytes], ...] = ()
    nodes: tuple[Node, ...] = ()
    used: tuple[tuple[str, int], ...] = ()
    results_at_close: frozenset[int] | None = None


class Violation(Exception):
    def __init__(self, invariant: str, message: str) -> None:
        super().__init__(f"{invariant}: {message}")
        self.invariant, self.message = invariant, message


def initial_world(bounds: Bounds) -> World:
    return World(nodes=tuple(Node(name=f"n{i}") for i in range(bounds.nodes)))


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


def _opened(store: Mapping[str, bytes], round_no: int) -> int:
    """The highest in-place attempt of the round opened in the store (0: none)."""
    attempt = 0
    while KEYS.attempt(round_no, attempt + 1) in store:
        attempt += 1
    return attempt


def _check_attempts(
    store: Mapping[str, bytes], results: Mapping[int, RoundResult], training: list[Node]
) -> None:
    """R16: a round's count carries the attempts of the round before; R17: nobody runs an
    attempt nobody opened."""
    for r, result in results.items():
        previous = results.get(r - 1)
        if result.closed or previous is None or previous.closed:
            continue
        carried = max(
            (p.prev_attempt for p in result.participants if p.prev_round == r - 1), default=0
        )
        if carried > _opened(store, r - 1):
            raise Violation("R16", f"round {r} carries attempt {carried}, never opened")
        base = previous.restart_count + carried
        top = base + (1 if KEYS.failures(r) in store else 0)
        if not base <= result.restart_count <= top:
            raise Violation("R16", f"round {r} has restart count {result.restart_count}")
    for node in training:
        assert node.world is not None
        if node.attempt > _opened(store, node.world.round_no):
            raise Violation("R17", f"{node.name} runs attempt {node.attempt}, never opened")


def check_invariants(world: World, config: RendezvousConfig) -> None:
    """Raise :class:`Violation` naming the first of R1, R3-R7, R16, R17 that ``world`` breaks."""
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
    _check_attempts(store, results, training)


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
        node.attempt,
    )


def world_key(world: World) -> object:
    """The canonical hashable form of a world: equal worlds give equal keys, so the search
    visits each state once."""
    nodes = tuple(_node_key(n) for n in world.nodes)
    return (world.now, world.store, world.used, world.results_at_close, nodes)
