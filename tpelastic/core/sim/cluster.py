"""A rendezvous cluster in virtual time: N nodes run the real join machine over an in-memory store.

This is the harness the property tests and the timeline demo drive. It runs the same
:func:`tpelastic.core.rendezvous.join.step` the adapters run, never a reimplementation; only the
store (a dict, each batch applied atomically) and time (a number) are simulated. A member of a
completed round behaves as an agent does between rounds: it heartbeats, looks at the next round
once per heartbeat interval, rejoins when that round opens (or opens it when nodes wait and there
is room), watches its ring successor, and fences itself when its own heartbeats fail for longer
than ``heartbeat_timeout - heartbeat_interval`` (before anyone can declare it dead).
"""

from __future__ import annotations

import enum

from attrs import define, field

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
    Reply,
    StoreOps,
    StoreWait,
    WaitEnded,
    run_ops,
)
from tpelastic.core.rendezvous.records import RoundResult, decode_counter, decode_result
from tpelastic.core.rendezvous.state import JoinRequested, JoinState

MAX_STEPS_WITHOUT_WAITING = 10_000


class SimulationStuck(Exception):
    """The simulated machines stopped making progress in virtual time: a bug, never an input."""


class Status(enum.Enum):
    JOINING = "joining"
    TRAINING = "training"
    FAILED = "failed"  # the join ended without a round (closed, timeout, corrupt)
    LEFT = "left"
    CRASHED = "crashed"
    FENCED = "fenced"


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


@define
class Cluster:
    """All nodes of one run. Every method is deterministic; time moves only in :meth:`advance`."""

    config: RendezvousConfig
    keys: RunKeys = field(factory=lambda: RunKeys("sim"))
    store: dict[str, bytes] = field(factory=dict)
    now: float = 0.0
    nodes: dict[str, SimNode] = field(factory=dict)
    log: list[str] = field(factory=list)
    store_ops: int = 0
    overlaps: list[str] = field(factory=list)

    # --- faults and requests -------------------------------------------------------------------

    def start(self, name: str) -> None:
        """A new node (or a restarted one, under a new name) joins the run."""
        assert name not in self.nodes, f"node {name} exists"
        self.nodes[name] = SimNode(name=name, last_beat=self.now, last_good_beat=self.now)
        self._run((Add(self.keys.heartbeat(name), 1),))
        self._begin_join(self.nodes[name], "first", None)

    def crash(self, name: str) -> None:
        """The node dies without a goodbye: no more heartbeats, no more steps."""
        node = self.nodes[name]
        node.status, node.world, node.wait, node.beating = Status.CRASHED, None, None, False
        self.log.append(f"{self.now:8.2f} {name} crashed")

    def leave(self, name: str) -> None:
        """A graceful leave of a training member: the others form a new round without it."""
        node = self.nodes[name]
        assert node.status is Status.TRAINING and node.world is not None
        self._run(membership.leave_ops(self.keys, node.world, name))
        node.status, node.world, node.beating = Status.LEFT, None, False
        self.log.append(f"{self.now:8.2f} {name} left gracefully")

    def fail_workers(self, name: str) -> None:
        """The node's workers failed: it reports the failure and rejoins (one budget unit)."""
        node = self.nodes[name]
        assert node.status is Status.TRAINING and node.world is not None
        self.log.append(f"{self.now:8.2f} {name} workers failed")
        self._begin_join(node, "failure", node.world.round_no)

    def lose_heartbeats(self, name: str) -> None:
        """The node keeps running but its heartbeats stop landing (its link to the store broke)."""
        self.nodes[name].beating = False
        self.log.append(f"{self.now:8.2f} {name} lost its heartbeats")

    def fence_deadline(self, node: SimNode) -> float:
        """Past this instant a node whose heartbeats fail may not train: peers may soon declare it
        dead (they need ``heartbeat_timeout`` since its last good beat), so it fences first."""
        margin = self.config.heartbeat_timeout - self.config.heartbeat_interval
        return node.last_good_beat + margin

    def close(self, name: str, outcome: str = "succeeded") -> None:
        node = self.nodes[name]
        forming = (node.world.round_no + 1) if node.world else node.join.round_no
        self._run(membership.close_ops(self.keys, forming, outcome, f"closed by {name}"))
        self.log.append(f"{self.now:8.2f} {name} closed the rendezvous ({outcome})")

    # --- time ----------------------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Move virtual time forward, firing heartbeats, watches and wait deadlines in order."""
        end = self.now + seconds
        fired_at_once = 0
        while True:
            nxt = self._next_timer()
            if nxt is None or nxt > end:
                break
            fired_at_once = fired_at_once + 1 if nxt <= self.now else 0
            if fired_at_once > MAX_STEPS_WITHOUT_WAITING:
                raise SimulationStuck(f"timers keep firing at t={self.now} without time moving")
            self.now = max(self.now, nxt)
            self._fire_timers()
        self.now = end

    def _next_timer(self) -> float | None:
        times = [n.wait.deadline for n in self._live() if n.wait is not None]
        times += [n.last_beat + self.config.heartbeat_interval for n in self._ticking()]
        times += [
            self.fence_deadline(n)
            for n in self._live()
            if n.status is Status.TRAINING and not n.beating
        ]
        return min(times) if times else None

    def _fire_timers(self) -> None:
        for node in sorted(self._live(), key=lambda n: n.name):
            self._fence_if_due(node)
            if node.wait is not None and node.wait.deadline <= self.now:
                self._feed(node, WaitEnded(present=self._present(node.wait), now=self.now))
            if node in self._ticking() and (
                node.last_beat + self.config.heartbeat_interval <= self.now
            ):
                self._tick(node)

    def _tick(self, node: SimNode) -> None:
        node.last_beat = self.now
        if node.beating:
            node.last_good_beat = self.now
            self._run((Add(self.keys.heartbeat(node.name), 1),))
        if node.status is Status.TRAINING and node.beating:
            self._watch(node)

    def _fence_if_due(self, node: SimNode) -> None:
        if node.status is Status.TRAINING and not node.beating:
            if self.now >= self.fence_deadline(node):
                node.status, node.world = Status.FENCED, None
                self.log.append(f"{self.now:8.2f} {node.name} fenced itself (heartbeats failing)")

    def _watch(self, node: SimNode) -> None:
        world = node.world
        assert world is not None
        seen = membership.read_watch(self._run(membership.watch_ops(self.keys, world.round_no)))
        if seen.closed is not None:
            node.status, node.world = Status.FAILED, None
            node.failure = f"closed: {seen.closed.outcome}"
            return
        if seen.next_opened is not None:
            self._begin_join(node, "rejoin", world.round_no)
            return
        if seen.waiting > 0 and world.world_size < self.config.max_nodes:
            self._begin_join(node, "scale_up", world.round_no)
            return
        successor = membership.ring_successor(world, node.name)
        if successor is not None:
            beat = decode_counter(self.store.get(self.keys.heartbeat(successor)))
            node.ring = node.ring.observe(successor, beat, self.now)
            if node.ring.is_dead(successor, self.now, self.config.heartbeat_timeout):
                self.log.append(f"{self.now:8.2f} {node.name} found {successor} dead")
                self._run(membership.report_dead_ops(self.keys, world, successor))
                self._begin_join(node, "membership", world.round_no)

    # --- driving the join machine --------------------------------------------------------------

    def _begin_join(self, node: SimNode, reason: str, from_round: int | None) -> None:
        node.status, node.world, node.wait = Status.JOINING, None, None
        node.ring = LivenessTracker()
        event = JoinRequested(
            run_id=self.keys.run_id,
            node=node.name,
            now=self.now,
            from_round=from_round,
            reason=reason,
        )
        node.join = JoinState()
        self._feed(node, event)

    def _feed(self, node: SimNode, event: object) -> None:
        """Step the node's join machine until it blocks on a wait or finishes."""
        queue = [event]
        steps = 0
        while queue:
            steps += 1
            if steps > MAX_STEPS_WITHOUT_WAITING:
                raise SimulationStuck(
                    f"{node.name} took {steps} steps at t={self.now} without blocking "
                    f"(phase {node.join.phase.name}): a loop in the join machine"
                )
            result = join.step(node.join, queue.pop(0), self.config)
            node.join, node.wait = result.state, None
            for effect in result.effects:
                if isinstance(effect, StoreOps):
                    queue.append(OpsDone(replies=self._run(effect.ops), now=self.now))
                elif isinstance(effect, StoreWait):
                    if self._present(effect) or effect.deadline <= self.now:
                        queue.append(WaitEnded(present=self._present(effect), now=self.now))
                    else:
                        node.wait = effect
                elif isinstance(effect, JoinSucceeded):
                    self._complete(node, effect)
                elif isinstance(effect, JoinFailed):
                    node.status, node.failure = Status.FAILED, f"{effect.kind}: {effect.reason}"
                    self.log.append(f"{self.now:8.2f} {node.name} join failed: {node.failure}")

    def _complete(self, node: SimNode, done: JoinSucceeded) -> None:
        node.status, node.world = Status.TRAINING, done.result
        self._fence_if_due(node)
        node.last_round = done.result.round_no
        node.completed_rounds.append(done.result.round_no)
        self.log.append(
            f"{self.now:8.2f} {node.name} is rank {done.rank}/{done.result.world_size} "
            f"of round {done.result.round_no}"
        )
        self._note_worlds()

    def _run(self, ops: tuple[Op, ...]) -> tuple[Reply, ...]:
        self.store_ops += len(ops)
        replies = run_ops(ops, self.store)
        self._wake_waiters()
        self._note_worlds()
        return replies

    def _wake_waiters(self) -> None:
        for node in sorted(self._live(), key=lambda n: n.name):
            if node.wait is not None and self._present(node.wait):
                self._feed(node, WaitEnded(present=True, now=self.now))

    def _present(self, wait: StoreWait) -> bool:
        return all(key in self.store for key in wait.keys)

    def _live(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.status not in (Status.CRASHED, Status.LEFT)]

    def _ticking(self) -> list[SimNode]:
        """Nodes whose agent still runs its keep-alive and watch loop."""
        return [n for n in self.nodes.values() if n.status in (Status.JOINING, Status.TRAINING)]

    def _note_worlds(self) -> None:
        rounds = self.training_rounds()
        if len(rounds) > 1:
            self.overlaps.append(f"{self.now:.2f}: rounds {sorted(rounds)} train side by side")

    # --- observations --------------------------------------------------------------------------

    def training_rounds(self) -> frozenset[int]:
        """The rounds whose worlds are training right now (one world at a time: at most one)."""
        return frozenset(
            n.world.round_no for n in self.nodes.values() if n.status is Status.TRAINING and n.world
        )

    def results(self) -> dict[int, RoundResult]:
        found = {}
        for key, raw in self.store.items():
            if key.startswith(self.keys.namespace + "/r") and key.endswith("/result"):
                result = decode_result(raw)
                found[result.round_no] = result
        return found
