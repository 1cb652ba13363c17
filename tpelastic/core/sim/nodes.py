"""What the simulator knows about each node, and the records a simulated run leaves behind."""

from __future__ import annotations

import enum

from attrs import define, field, frozen

from tpelastic.core.rendezvous.liveness import LivenessTracker
from tpelastic.core.rendezvous.ops import StoreWait
from tpelastic.core.rendezvous.records import RoundResult
from tpelastic.core.rendezvous.state import JoinState


class Status(enum.Enum):
    JOINING = "joining"
    TRAINING = "training"
    FAILED = "failed"  # the join ended without a round (closed, timeout, corrupt, connection)
    LEFT = "left"
    CRASHED = "crashed"
    FENCED = "fenced"


@frozen(kw_only=True)
class SimRecord:
    """One thing that happened, for the trace: virtual instant, name, node ('' for the run)."""

    t: float
    name: str
    node: str = ""
    fields: tuple[tuple[str, object], ...] = ()


@define
class SimNode:
    name: str
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
