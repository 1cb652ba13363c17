"""Driving each simulated node's real join machine: store batches with latency, waits that wake
per key, connection failures, and the bookkeeping of who trains in which round.

A batch sent at ``t`` is applied, and its replies arrive, at ``t + latency`` (plus the node's own
extra latency when it is slow); a blocked wait wakes ``latency`` after its key appears. With zero
latency a node's batches apply at once, as in a perfect store. A batch that reaches an
unavailable store, or comes from a partitioned node, fails: a join then ends the way the real
driver ends it (a connection error), and the agent retries after ``retry_after`` or exits.
"""

from __future__ import annotations

from collections.abc import Callable

from attrs import define, field

from tpelastic.core.rendezvous import join
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.liveness import LivenessTracker
from tpelastic.core.rendezvous.ops import (
    JoinFailed,
    JoinSucceeded,
    Op,
    OpsDone,
    Reply,
    StoreOps,
    StoreWait,
    WaitEnded,
)
from tpelastic.core.rendezvous.records import RoundResult, decode_result
from tpelastic.core.rendezvous.state import JoinRequested, JoinState, retry_request
from tpelastic.core.sim.nodes import SimNode, SimRecord, Status
from tpelastic.core.sim.queue import EventQueue, SimulationStuck
from tpelastic.core.sim.store import SimStore
from tpelastic.core.values import Emit, Rejected

MAX_STEPS_WITHOUT_WAITING = 10_000
CONNECTION_LOST = "the store could not be reached"
# Immutable starting values, shared by every node instead of built per join.
FRESH_JOIN = JoinState()
FRESH_RING = LivenessTracker()
OnReply = Callable[[tuple[Reply, ...] | None], None]


def _counted_liveness(_instance: object, _attribute: object, config: RendezvousConfig) -> None:
    # The simulated store is a dict without leases: a leased heartbeat key would never expire,
    # so a dead node would never look dead. Refuse rather than simulate something else.
    if config.leased_liveness:
        raise ValueError("the simulator models counted heartbeats only: use leased_liveness=False")


@define
class JoinDriver:
    """Runs each node's join machine against the simulated store, in virtual time.

    The agent's behaviour between rounds (heartbeats, watching, fencing) lives in the subclass
    :class:`~tpelastic.core.sim.cluster.Cluster`, which the hooks below call into.

    Attributes:
        latency: seconds from sending a store batch to its replies (and from a key's arrival to
            the wake-up of a wait on it).
        retry_after: after a join fails to reach the store, the agent rejoins this many seconds
            later; None means it exits (status FAILED).
        detail: keep per-node log lines and records (turn off for very large runs).
    """

    config: RendezvousConfig = field(validator=_counted_liveness)
    keys: RunKeys = field(factory=lambda: RunKeys("sim"))
    sim_store: SimStore = field(factory=SimStore)
    nodes: dict[str, SimNode] = field(factory=dict)
    log: list[str] = field(factory=list)
    overlaps: list[str] = field(factory=list)
    records: list[SimRecord] = field(factory=list)
    latency: float = 0.0
    retry_after: float | None = None
    detail: bool = True
    store_up: bool = True
    # Faults of tpelastic.core.sim.faults: every batch's extra delay (message delay), and the
    # instant a paused store answers again (its batches wait until then).
    message_delay: float = 0.0
    store_paused_until: float = 0.0
    # round -> [first instant a node trained in it, last such instant, how many nodes]
    round_times: dict[int, list[float]] = field(factory=dict)
    round_results: dict[int, RoundResult] = field(factory=dict)
    # Virtual seconds, after the first full world formed, during which no full world trained.
    lost: float = 0.0
    _lost_since: float | None = field(default=None, alias="_lost_since")
    _formed: bool = field(default=False, alias="_formed")
    queue: EventQueue = field(factory=EventQueue)
    _training: dict[int, int] = field(factory=dict, alias="_training")
    # (round, in-place attempt) -> how many nodes train in it: a full world is one entry.
    _running: dict[tuple[int, int], int] = field(factory=dict, alias="_running")

    @property
    def now(self) -> float:
        return self.queue.now

    @property
    def store(self) -> dict[str, bytes]:
        return self.sim_store.data

    @property
    def store_ops(self) -> int:
        return self.sim_store.ops

    def _settle(self) -> None:
        # Called from inside the queue (a scheduled fault), the running loop settles it instead.
        if not self.queue.running:
            self.queue.run_until(self.now, self._limit())

    def _limit(self) -> int:
        return MAX_STEPS_WITHOUT_WAITING + 200 * len(self.nodes)

    # --- hooks for the agent's behaviour between rounds ----------------------------------------

    def _arm_tick(self, node: SimNode) -> None:
        """A node (re)started joining: make sure its keep-alive runs."""

    def _heart_failing(self, node: SimNode) -> bool:
        return False

    def _heartbeats_held(self, node: SimNode) -> bool:
        """No peer can have found the node dead yet (what a retried join tells the core)."""
        return True

    def _fence_if_due(self, node: SimNode) -> None:
        """A node just completed a round: it must not train if its heartbeats fail."""

    def _started_training(self, node: SimNode) -> None:
        """A node just started training in a round (attempt 0): it begins to watch it."""

    def _join_succeeded(self, node: SimNode, done: JoinSucceeded) -> None:
        """The join machine formed a round with the node (the agent decides what follows)."""
        self._complete(node, done)

    def _join_ended(self, node: SimNode, failed: JoinFailed) -> None:
        """The join ended without a round and without a retry (the agent decides)."""
        self._join_failed(node, f"{failed.kind}: {failed.reason}")

    def _store_call_failed(self, node: SimNode) -> None:
        """A batch of the node's could not reach the store (its store client's view)."""

    def _store_call_ok(self, node: SimNode) -> None:
        """A batch of the node's reached the store while it counted an outage."""

    def _fire_held(self) -> None:
        """A batch wrote keys that held waits were placed on (``sim_store.fired``)."""
        self.sim_store.fired = []

    def _reachable(self, node: SimNode) -> bool:
        return self.store_up and not node.partitioned

    def _latency(self, node: SimNode) -> float:
        held = self.store_paused_until - self.now
        return self.latency + node.extra_latency + self.message_delay + (held if held > 0 else 0)

    def _apply_from(self, node: SimNode, ops: tuple[Op, ...]) -> tuple[Reply, ...] | None:
        """Apply a batch that reaches the store now; None when it cannot reach it."""
        if not self._reachable(node):
            self.sim_store.failed_batches += 1
            self._store_call_failed(node)
            return None
        if node.outage is not None:
            self._store_call_ok(node)
        replies, woken = self.sim_store.apply(ops)
        for name, token in woken:
            self._wake(self.nodes[name], token)
        if self.sim_store.fired:
            self._fire_held()
        return replies

    def _request(
        self, node: SimNode, ops: tuple[Op, ...], on_reply: OnReply, stale_ok: bool = False
    ) -> None:
        """Send ``ops``; call ``on_reply(replies or None)`` when the answer is back."""
        delay = self._latency(node)
        if delay == 0:
            on_reply(self._apply_from(node, ops))
            return
        gen = node.gen

        def arrive() -> None:
            replies = self._apply_from(node, ops)
            if stale_ok or node.gen == gen:
                on_reply(replies)

        self.queue.schedule(self.now + delay, arrive)

    def _send(self, node: SimNode, ops: tuple[Op, ...]) -> None:
        """Fire and forget: the batch lands after the node's latency, whatever becomes of it."""
        if ops:
            self._request(node, ops, lambda _replies: None, stale_ok=True)

    def _wake(self, node: SimNode, token: int) -> None:
        if node.wait_id != token or node.wait is None or node.wake_due:
            return
        if self.sim_store.present(node.wait.keys):
            node.wake_due = True
            self.queue.schedule(self.now + self._latency(node), lambda: self._end_wait(node, token))

    def _drop_wait(self, node: SimNode) -> None:
        """The node's wait is over or abandoned: forget it and cancel its deadline timer."""
        node.wait, node.wake_due = None, False
        if node.wait_timer:
            self.queue.cancel(node.wait_timer)
            node.wait_timer = 0

    def _wait_deadline(self, node: SimNode, token: int) -> None:
        node.wait_timer = 0  # it is running: nothing left to cancel
        self._end_wait(node, token)

    def _end_wait(self, node: SimNode, token: int) -> None:
        if node.wait_id != token or node.wait is None:
            return
        keys = node.wait.keys
        self._drop_wait(node)
        node.wait_id += 1
        self._feed(node, WaitEnded(present=self.sim_store.present(keys), now=self.now))

    # --- driving the join machine --------------------------------------------------------------

    def _begin_join(
        self,
        node: SimNode,
        reason: str,
        from_round: int | None,
        seen_attempt: int = 0,
        charged_attempt: int | None = None,
    ) -> None:
        """Start a join. ``seen_attempt``: an attempt of ``from_round`` the node saw opened
        (and did not run); the join reports the higher of it and the attempt it ran, or no more
        than ``charged_attempt`` (a peer's loss refunded the newer ones)."""
        attempt = 0
        if from_round is not None and from_round == node.last_round:
            attempt = max(node.attempt, seen_attempt)
            if charged_attempt is not None:
                attempt = min(attempt, charged_attempt)
        event = JoinRequested(
            run_id=self.keys.run_id,
            node=node.name,
            now=self.now,
            from_round=from_round,
            reason=reason,
            attempt=attempt,
        )
        self._start_join(node, event)

    def _retry_join(self, node: SimNode, lost: JoinState) -> None:
        """Retry ``lost`` as the real driver does: the retry takes up the place the node holds
        (R12) and says whether its heartbeats held meanwhile."""
        held = self._heartbeats_held(node)
        self._start_join(node, retry_request(lost, now=self.now, heartbeats_held=held))

    def _start_join(self, node: SimNode, event: JoinRequested) -> None:
        node.retry_pending = False
        self._set_status(node, Status.JOINING, None)
        self._drop_wait(node)
        node.gen += 1
        node.ring = FRESH_RING
        self._note(
            node, "rendezvous.join_started", "", reason=event.reason, from_round=event.from_round
        )
        node.join = FRESH_JOIN
        self._arm_tick(node)
        # The join's first step is the queue's next action at this instant, not a call from
        # inside the step that asked for it: with no latency a join can complete, and its
        # round end, within one instant, and nested calls would recurse without bound.
        gen = node.gen

        def first_step() -> None:
            if node.gen == gen:
                self._feed(node, event)

        self.queue.schedule(self.now, first_step)

    def _feed(self, node: SimNode, event: object) -> None:
        """Step the node's join machine until it blocks on a reply or a wait, or finishes."""
        pending = [event]
        steps = 0
        while steps < len(pending):
            if steps >= MAX_STEPS_WITHOUT_WAITING:
                raise SimulationStuck(
                    f"{node.name} took {steps + 1} steps at t={self.now} without blocking "
                    f"(phase {node.join.phase.name}): a loop in the join machine"
                )
            result = join.step(node.join, pending[steps], self.config)
            steps += 1
            node.join = result.state
            for effect in result.effects:
                nxt = self._effect(node, effect)
                if nxt is not None:
                    pending.append(nxt)

    def _effect(self, node: SimNode, effect: object) -> object | None:
        """Carry out one effect; return the event to feed at once, if any."""
        if isinstance(effect, StoreOps):
            return self._store_ops(node, effect.ops)
        if isinstance(effect, StoreWait):
            return self._store_wait(node, effect)
        if isinstance(effect, JoinSucceeded):
            self._join_succeeded(node, effect)
        elif isinstance(effect, JoinFailed):
            self._join_ended(node, effect)
        elif isinstance(effect, Emit):
            self._note(node, effect.name, "", **effect.as_dict())
        elif isinstance(effect, Rejected):
            raise SimulationStuck(
                f"{node.name}: the join machine rejected {effect.event} in {effect.phase}: "
                f"{effect.reason}"
            )
        return None

    def _store_ops(self, node: SimNode, ops: tuple[Op, ...]) -> object | None:
        gen = node.gen
        if self._latency(node) == 0:
            replies = self._apply_from(node, ops)
            if replies is None:
                self._connection_lost(node)
                return None
            return OpsDone(replies=replies, now=self.now)

        def answer(replies: tuple[Reply, ...] | None) -> None:
            if node.gen != gen:
                return
            if replies is None:
                self._connection_lost(node)
            else:
                self._feed(node, OpsDone(replies=replies, now=self.now))

        self._request(node, ops, answer)
        return None

    def _store_wait(self, node: SimNode, wait: StoreWait) -> object | None:
        if not self._reachable(node):
            self._connection_lost(node)
            return None
        present = self.sim_store.present(wait.keys)
        self._drop_wait(node)
        node.wait = wait
        node.wait_id += 1
        token = node.wait_id
        if present or wait.deadline <= self.now:
            if self._latency(node) == 0:
                node.wait = None
                return WaitEnded(present=present, now=self.now)
            node.wake_due = True
            self.queue.schedule(self.now + self._latency(node), lambda: self._end_wait(node, token))
            return None
        self.sim_store.wait_on(wait.keys, node.name, token)
        node.wait_timer = self.queue.schedule(
            wait.deadline, lambda: self._wait_deadline(node, token)
        )
        return None

    def _connection_lost(self, node: SimNode) -> None:
        """What the real driver does when the store fails mid-join: the join ends with a
        connection error, and the handler retries it after ``retry_after`` until the outage is
        waited out (``store_lost``); then, or without a retry policy, the agent is told."""
        lost = node.join  # a phase that sent a store request: neither idle nor over
        if self.retry_after is None or node.store_lost:
            reason = node.store_lost or CONNECTION_LOST
            self._join_ended(node, JoinFailed(kind="connection", reason=reason))
        else:
            self._join_failed(node, f"connection: {CONNECTION_LOST}")
            gen = node.gen
            node.retry_pending = True

            def retry() -> None:
                if node.gen == gen and node.status is Status.FAILED:
                    self._retry_join(node, lost)

            self.queue.schedule(self.now + self.retry_after, retry)

    def _join_failed(self, node: SimNode, why: str) -> None:
        self._set_status(node, Status.FAILED, None)
        self._drop_wait(node)
        node.failure = why
        node.gen += 1
        self._note(node, "rendezvous.join_failed", f"{node.name} join failed: {why}", reason=why)

    def _complete(self, node: SimNode, done: JoinSucceeded) -> None:
        result = done.result
        self.round_results[result.round_no] = result
        node.attempt = 0  # before it counts as training: a round starts at its attempt 0
        self._set_status(node, Status.TRAINING, result)
        node.last_round = result.round_no
        node.completed_rounds.append(result.round_no)
        times = self.round_times.setdefault(result.round_no, [self.now, self.now, 0.0])
        times[1], times[2] = self.now, times[2] + 1
        self._note(
            node,
            "rendezvous.joined",
            f"{node.name} is rank {done.rank}/{result.world_size} of round {result.round_no}",
            round=result.round_no,
            rank=done.rank,
            world_size=result.world_size,
            restart_count=result.restart_count,
        )
        self._started_training(node)
        if self._heart_failing(node):
            self._fence_if_due(node)

    # --- bookkeeping ---------------------------------------------------------------------------

    def _set_status(self, node: SimNode, status: Status, world: RoundResult | None) -> None:
        if node.status is Status.TRAINING and node.world is not None:
            left = self._training[node.world.round_no] - 1
            if left:
                self._training[node.world.round_no] = left
            else:
                del self._training[node.world.round_no]
            self._count_run(node.world.round_no, node.attempt, -1)
        node.status, node.world = status, world
        if status is Status.TRAINING and world is not None:
            self._training[world.round_no] = self._training.get(world.round_no, 0) + 1
            self._count_run(world.round_no, node.attempt, 1)
            if len(self._training) > 1:
                rounds = sorted(self._training)
                self.overlaps.append(f"{self.now:.2f}: rounds {rounds} train side by side")
        self._account_health()

    def _count_run(self, round_no: int, attempt: int, delta: int) -> None:
        key = (round_no, attempt)
        count = self._running.get(key, 0) + delta
        if count:
            self._running[key] = count
        else:
            del self._running[key]

    def _account_health(self) -> None:
        # A full world: every member of one round trains, all in the same attempt of it (while
        # an in-place restart spreads, the members of the old attempt do not train with the new).
        full = False
        if len(self._running) == 1:
            (round_no, _attempt), count = next(iter(self._running.items()))
            full = count == self.round_results[round_no].world_size
        if full:
            self._formed = True
            if self._lost_since is not None:
                self.lost += self.now - self._lost_since
                self._lost_since = None
        elif self._formed and self._lost_since is None:
            self._lost_since = self.now

    def time_lost(self) -> float:
        """Virtual seconds so far, after the first world formed, without a full world training
        (all members of one round in one attempt of it)."""
        open_gap = self.now - self._lost_since if self._lost_since is not None else 0.0
        return self.lost + open_gap

    def _note(self, node: SimNode | None, name: str, text: str, /, **fields: object) -> None:
        if not self.detail and node is not None and name.startswith("rendezvous.join"):
            return
        who = node.name if node is not None else ""
        self.records.append(
            SimRecord(t=self.now, name=name, node=who, fields=tuple(fields.items()))
        )
        if text and self.detail:
            self.log.append(f"{self.now:8.2f} {text}")

    # --- observations --------------------------------------------------------------------------

    def worlds(self) -> dict[tuple[int, int], int]:
        """How many nodes train in each (round, in-place attempt) right now: one entry holding
        the round's whole world is a full world."""
        return dict(self._running)

    def training_rounds(self) -> frozenset[int]:
        """The rounds whose worlds are training right now (one world at a time: at most one)."""
        return frozenset(self._training)

    def results(self) -> dict[int, RoundResult]:
        found = {}
        for key, raw in self.store.items():
            if key.startswith(self.keys.namespace + "/r") and key.endswith("/result"):
                result = decode_result(raw)
                found[result.round_no] = result
        return found
