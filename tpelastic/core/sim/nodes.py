"""What the simulator knows about each node, and the records a simulated run leaves behind."""

from __future__ import annotations

import enum

from attrs import define, evolve, field, frozen

from tpelastic.core.agent.events import RoundCompleted
from tpelastic.core.agent.states import AgentState
from tpelastic.core.node import NodeState
from tpelastic.core.rendezvous.liveness import LivenessTracker
from tpelastic.core.rendezvous.ops import JoinSucceeded, StoreWait
from tpelastic.core.rendezvous.records import RoundResult
from tpelastic.core.rendezvous.state import JoinState
from tpelastic.core.store_outage import Outage


class Status(enum.Enum):
    JOINING = "joining"
    TRAINING = "training"
    FAILED = "failed"  # the join ended without a round (closed, timeout, corrupt, connection)
    LEFT = "left"
    CRASHED = "crashed"
    # The agent holds a failure (workers stopped, the collateral window) or retries opening
    # an attempt: a member of its world that does not train, and keeps beating and looking.
    HOLDING = "holding"
    # Its keep-alive lapsed: workers stopped, out of its world; it keeps beating and re-joins
    # once a beat lands again (its membership machine decides).
    FENCED = "fenced"


@frozen(kw_only=True)
class SimRecord:
    """One thing that happened, for the trace: virtual instant, name, node ('' for the run)."""

    t: float
    name: str
    node: str = ""
    fields: tuple[tuple[str, object], ...] = ()


# Immutable starting value, shared by every node (a simulated agent runs one local worker).
FRESH_NODE_STATE = NodeState(agent=AgentState())


@define
class SimNode:
    name: str
    # The product's composed core this node runs (tpelastic.core.node; sim.agents steps it),
    # held as a state and the node's rank in its world: members that took one shared step
    # (AgentDriver._step's ``alike``) hold the same state object until their own is read.
    shared_core: NodeState = FRESH_NODE_STATE
    own_rank: int | None = None  # None: ``shared_core`` is this node's state as it is
    # The join the agent's RoundCompleted came from, until its StartWorkers is carried out.
    joined: JoinSucceeded | None = None
    # Hints for the join the agent asks for next: the reason a round was opened with, and an
    # attempt of the node's round it saw opened but did not run (reported by the join).
    join_reason: str = ""
    seen_attempt: int = 0
    status: Status = Status.JOINING
    join: JoinState = field(factory=JoinState)
    world: RoundResult | None = None
    last_round: int | None = None
    wait: StoreWait | None = None
    beating: bool = True
    last_beat: float = 0.0
    last_good_beat: float = 0.0
    ring: LivenessTracker = field(factory=LivenessTracker)
    failure: str = ""
    completed_rounds: list[int] = field(factory=list)
    partitioned: bool = False
    extra_latency: float = 0.0
    # Bumped whenever the node's outstanding request stops mattering (crash, new join, failure),
    # so a reply or wake-up scheduled earlier is recognised as stale and dropped.
    gen: int = 0
    wait_id: int = 0
    # The queue handle of the current wait's deadline, cancelled when the wait ends sooner
    # (0: none pending).
    wait_timer: int = 0
    wake_due: bool = False
    ticking: bool = False
    # The node's join lost the store and the agent retries it later (it keeps beating meanwhile).
    retry_pending: bool = False
    # The in-place attempt of its round it runs, or ran last (0: the round's first start); it
    # goes into the node's next join as the highest attempt of that round it reached.
    attempt: int = 0
    # The node's process is stopped (tpelastic.core.sim.faults.pause_node): its timers and looks
    # wait for the resume; ``beating`` is what it was before the pause.
    paused: bool = False
    beating_before_pause: bool = True
    # Its workers failed while it was stopped: its agent sees the exits when it resumes.
    failed_while_paused: bool = False
    # The store outage its store client is in (core.store_outage), its failed calls in a row,
    # and, once the outage is waited out, the one line every further call fails with.
    outage: Outage | None = None
    store_tries: int = 0
    store_lost: str = ""

    @property
    def core(self) -> NodeState:
        """The node's state in the product's core (its own rank in it)."""
        state = self.shared_core
        if self.own_rank is not None:
            if state.agent.group_rank != self.own_rank:
                agent = evolve(state.agent, group_rank=self.own_rank)
                state = self.shared_core = NodeState(agent=agent, member=state.member)
            self.own_rank = None
        return state

    @core.setter
    def core(self, state: NodeState) -> None:
        self.shared_core, self.own_rank = state, None

    def share_core(self, state: NodeState, rank: int) -> None:
        """Take ``state`` (another member's, equal to this node's but for the rank) as its own."""
        self.shared_core, self.own_rank = state, rank

    @property
    def agent(self) -> AgentState:
        """The node's agent state (phase, round, rank, the restart count it knows)."""
        return self.core.agent

    @property
    def agent_but_rank(self) -> AgentState:
        """The node's agent state, its ``group_rank`` possibly another member's (cheap)."""
        return self.shared_core.agent


def round_completed(done: JoinSucceeded, now: float) -> RoundCompleted:
    """A completed join as the agent's observation: this node's rank in the round's world and
    the round's restart count (a dynamic round starts at attempt 0)."""
    result = done.result
    return RoundCompleted(
        now=now,
        round=result.round_no,
        group_rank=done.rank,
        group_world_size=result.world_size,
        restart_count=result.restart_count,
    )
