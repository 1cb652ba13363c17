"""The explorer's model: bounds, the world it searches (nodes, store, clock), the invariants
R1, R3-R7, R16 and R17 checked on every world, and the canonical key that deduplicates worlds.

Each node holds the product's whole core: its composed state (:class:`tpelastic.core.node.
NodeState`: agent table, restart budget, membership machine), its join machine's state, and
what its adapters would know (the workers it runs, its ring successor's sightings, when its last
heartbeat landed, its store client's outage).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from attrs import frozen

from tpelastic.core import agent as ag
from tpelastic.core import membership as mb
from tpelastic.core.node import NodeConfig, NodeState, NodeStep
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.liveness import LivenessTracker, peer_loss_window
from tpelastic.core.rendezvous.ops import Op, StoreOps, StoreWait
from tpelastic.core.rendezvous.records import RoundResult, decode_node, decode_result
from tpelastic.core.rendezvous.state import JoinState
from tpelastic.core.store_outage import Outage, OutagePolicy
from tpelastic.core.table import Step

StepFn = Callable[[JoinState, object, RendezvousConfig], Step[JoinState]]
CoreFn = Callable[[NodeState, object, NodeConfig], NodeStep]
Label = tuple[str, str]  # (event, node) -- node "" for tick and the store's faults
KEYS = RunKeys("explore")
STORE_HOST = "n0"  # with ``Bounds.store_host``: the agent whose process serves the store
INTERVAL = 1.0  # one tick: the heartbeat interval


@frozen(kw_only=True)
class Bounds:
    """How much of the world to explore: nodes, the rendezvous and agent settings, and how many
    of each fault may happen (every count is a bound on the whole search).

    Faults: ``crashes`` (a node's process dies), ``leaves`` (SIGTERM: a graceful leave),
    ``failures`` (a member's workers fail; ``restart_in_place`` says whether the agent restarts
    the round in place or re-joins), ``finishes`` (a member's workers succeed), ``pauses`` (a
    node's process stops until it resumes: its timers fire late, its clock jumps; the store
    host's pause stops the store too), ``store_pauses`` (the store stops answering until it
    resumes: its process is stopped, or an outage its clients wait out), ``host_deaths`` (the
    store-hosting node dies and the store with it, for good), ``delays`` (one heartbeat of a
    node lands a tick late) and ``cuts`` (one node alone is cut off from the store, which
    serves the others, until it reconnects: its calls wait, its beats do not land). ``ticks``
    bounds how often time moves by one heartbeat interval.
    """

    nodes: int = 3
    min_nodes: int = 2
    max_nodes: int = 3
    ticks: int = 3
    crashes: int = 1
    leaves: int = 0
    failures: int = 1
    finishes: int = 0
    pauses: int = 0
    store_pauses: int = 0
    host_deaths: int = 0
    delays: int = 0
    cuts: int = 0
    restart_in_place: bool = False
    max_restarts: int = 1
    store_host: bool = False  # n0's process serves the store (c10d's default)
    heartbeat_timeout: float = 2.0
    last_call_timeout: float = 1.0
    join_timeout: float = 1000.0
    # A silent store is waited out this long: longer than any search, so only a store that is
    # gone for good (its host died: waited out for the keep-alive expiry) makes calls fail.
    read_timeout: float = 1000.0
    max_states: int = 2_000_000

    def config(self) -> RendezvousConfig:
        made = _RENDEZVOUS.get(self)
        if made is None:
            made = _RENDEZVOUS[self] = self._config()
        return made

    def _config(self) -> RendezvousConfig:
        return RendezvousConfig(
            min_nodes=self.min_nodes,
            max_nodes=self.max_nodes,
            join_timeout=self.join_timeout,
            last_call_timeout=self.last_call_timeout,
            heartbeat_interval=INTERVAL,
            heartbeat_timeout=self.heartbeat_timeout,
        )

    def node_config(self, name: str) -> NodeConfig:
        """What ``name``'s core is configured with, as the adapter derives it."""
        agent = ag.AgentConfig(
            max_restarts=self.max_restarts,
            min_nodes=self.min_nodes,
            max_nodes=self.max_nodes,
            restart_in_place=self.restart_in_place,
            collateral_window=peer_loss_window(self.heartbeat_timeout, INTERVAL),
        )
        member = mb.MemberConfig(
            heartbeat_timeout=self.heartbeat_timeout,
            heartbeat_interval=INTERVAL,
            hosts_store=self.store_host and name == STORE_HOST,
        )
        return NodeConfig(agent=agent, member=member)

    def policy(self) -> OutagePolicy:
        expiry, read = self.heartbeat_timeout, self.read_timeout
        return OutagePolicy(keep_alive_expiry=expiry, read_timeout=read)


_RENDEZVOUS: dict[Bounds, RendezvousConfig] = {}


class Phase(enum.Enum):
    IDLE = "idle"  # not started yet
    UP = "up"  # its agent process runs
    DOWN = "down"  # crashed: the process died without a goodbye
    ENDED = "ended"  # its agent reached a terminal outcome and the process exited


class StoreState(enum.Enum):
    UP = "up"
    PAUSED = "paused"  # it does not answer: calls wait for the resume, no heartbeat lands
    GONE = "gone"  # its host died: connections are refused for good


_FRESH_CORE = NodeState(agent=ag.AgentState())
# A handler's store write waiting for the store, and the effects of the step after it.
Outbox = tuple[object, tuple[Op, ...], tuple[object, ...]]


@frozen(kw_only=True)
class Node:
    name: str
    phase: Phase = Phase.IDLE
    core: NodeState = _FRESH_CORE
    join: JoinState = JoinState()
    pending: StoreOps | StoreWait | None = None
    world: RoundResult | None = None
    workers: int | None = None  # the in-place attempt its workers run; None: stopped
    attempt: int = 0  # the attempt of its last round it ran last (its next join reports it)
    ring: LivenessTracker = LivenessTracker()
    last_beat: float = 0.0  # when its last heartbeat landed (or it started)
    paused: bool = False
    cut: bool = False  # cut off from the store (which serves the others): its calls wait
    delayed: bool = False  # its next heartbeat will land a tick late
    late_beat: float | None = None  # a heartbeat sent then, still on its way
    outage: Outage | None = None
    lost: str = ""  # the store client waited the outage out: every call fails with this
    outbox: Outbox | None = None

    @property
    def agent(self) -> ag.AgentState:
        return self.core.agent

    @property
    def training(self) -> bool:
        """Its workers run in its world (a paused node's workers train with nobody: its peers
        are past the point where they wait for it, or wait for it to resume)."""
        return (
            self.phase is Phase.UP
            and self.workers is not None
            and self.world is not None
            and not self.paused
        )

    @property
    def member(self) -> bool:
        """Its agent is in a world (running, holding a failure, at the exit barrier)."""
        return self.phase is Phase.UP and self.agent.phase in _MEMBER and self.world is not None

    @property
    def left(self) -> bool:
        code = self.agent.exit_code
        return self.phase is Phase.ENDED and code is not None and code >= ag.EXIT_SIGNAL_BASE


_MEMBER = frozenset({ag.AgentPhase.RUNNING, ag.AgentPhase.HOLDING, ag.AgentPhase.EXIT_BARRIER})


@frozen(kw_only=True)
class World:
    now: float = 0.0
    store: tuple[tuple[str, bytes], ...] = ()
    nodes: tuple[Node, ...] = ()
    used: tuple[tuple[str, int], ...] = ()
    store_state: StoreState = StoreState.UP
    results_at_close: frozenset[int] | None = None
    closed_by: str = ""  # the agent whose close landed first


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
        assert node.world is not None and node.workers is not None
        if node.workers > _opened(store, node.world.round_no):
            raise Violation("R17", f"{node.name} runs attempt {node.workers}, never opened")


def check_invariants(world: World, config: RendezvousConfig) -> None:
    """Raise :class:`Violation` naming the first of R1, R3-R7, R16, R17 that ``world`` breaks."""
    store = dict(world.store)
    results = _results(store)
    training = [n for n in world.nodes if n.training]
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
    if (KEYS.closed() in store) != bool(world.closed_by):
        raise Violation("R6", "the rendezvous closed without an agent's close")
    rounds = {n.world.round_no for n in training if n.world is not None}
    if len(rounds) > 1:
        raise Violation("R7", f"rounds {sorted(rounds)} train side by side")
    _check_attempts(store, results, training)


# --- canonical form ----------------------------------------------------------------------------

# Every field of a join state is hashable except the liveness tracker's mapping.
_JOIN_FIELDS = tuple(a.name for a in attrs.fields(JoinState) if a.name != "liveness")


def join_key(state: JoinState) -> object:
    return (
        tuple(getattr(state, f) for f in _JOIN_FIELDS),
        tuple(sorted(state.liveness.seen.items())),
    )


def node_key(node: Node) -> object:
    return (
        node.name,
        node.phase,
        node.core,
        join_key(node.join),
        node.pending,
        node.world,
        node.workers,
        node.attempt,
        tuple(sorted(node.ring.seen.items())),
        node.last_beat,
        node.paused,
        node.cut,
        node.delayed,
        node.late_beat,
        node.outage,
        node.lost,
        node.outbox,
    )


class Interner:
    """Numbers nodes by their canonical form, once per node object: a search's worlds share
    most of their node objects, and hashing a node's values again for every world would be
    most of the search's time. Holds the nodes it numbered (their ids stay theirs)."""

    def __init__(self) -> None:
        self._numbers: dict[object, int] = {}
        self._seen: dict[int, tuple[Node, int]] = {}

    def number(self, node: Node) -> int:
        hit = self._seen.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        if len(self._seen) > 1_000_000:
            self._seen.clear()
        number = self._numbers.setdefault(node_key(node), len(self._numbers))
        self._seen[id(node)] = (node, number)
        return number


def world_key(world: World, interner: Interner | None = None) -> object:
    """The canonical hashable form of a world: equal worlds give equal keys, so the search
    visits each state once (an ``interner`` numbers the nodes; keys of one search must all
    come from the same one)."""
    if interner is None:
        nodes: tuple[object, ...] = tuple(node_key(n) for n in world.nodes)
    else:
        nodes = tuple(interner.number(n) for n in world.nodes)
    return (
        world.now,
        world.store,
        world.used,
        world.store_state,
        world.results_at_close,
        world.closed_by,
        nodes,
    )
