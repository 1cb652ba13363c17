"""Random joins, leaves, crashes, heartbeat losses, failures, closes and time through the real
rendezvous machine over an in-memory store; every invariant of specs/rendezvous.md after each step.
"""

from __future__ import annotations

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.records import decode_node
from tpelastic.core.sim.cluster import Cluster, Status

INTERVAL, TIMEOUT, LAST_CALL = 1.0, 3.0, 2.0
MAX_NODES_EVER = 16


class RendezvousCluster(RuleBasedStateMachine):
    @initialize(
        bounds=st.tuples(st.integers(1, 4), st.integers(0, 4)),
        first=st.integers(0, 6),
    )
    def setup(self, bounds: tuple[int, int], first: int) -> None:
        low, extra = bounds
        self.config = RendezvousConfig(
            min_nodes=low,
            max_nodes=low + extra,
            join_timeout=100_000.0,  # the liveness check below must not race join timeouts
            last_call_timeout=LAST_CALL,
            heartbeat_interval=INTERVAL,
            heartbeat_timeout=TIMEOUT,
        )
        self.cluster = Cluster(config=self.config)
        self.started = 0
        self.closed_by_rule = False
        self.results_at_close: set[int] | None = None
        note(f"min={low} max={low + extra}")
        for _ in range(first):
            self._start()

    def _start(self) -> None:
        self.started += 1
        self.cluster.start(f"n{self.started}")

    def _with(self, *statuses: Status) -> list[str]:
        return sorted(n for n, x in self.cluster.nodes.items() if x.status in statuses)

    @precondition(lambda self: self.started < MAX_NODES_EVER)
    @rule()
    def join_late(self) -> None:
        self._start()

    @precondition(lambda self: self._with(Status.JOINING, Status.TRAINING))
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        self.cluster.crash(data.draw(st.sampled_from(self._with(Status.JOINING, Status.TRAINING))))

    @precondition(lambda self: self._with(Status.TRAINING))
    @rule(data=st.data())
    def leave_gracefully(self, data: st.DataObject) -> None:
        self.cluster.leave(data.draw(st.sampled_from(self._with(Status.TRAINING))))

    @precondition(lambda self: self._with(Status.TRAINING))
    @rule(data=st.data())
    def worker_failure(self, data: st.DataObject) -> None:
        self.cluster.fail_workers(data.draw(st.sampled_from(self._with(Status.TRAINING))))

    @precondition(lambda self: self._with(Status.JOINING, Status.TRAINING))
    @rule(data=st.data())
    def heartbeat_loss(self, data: st.DataObject) -> None:
        self.cluster.lose_heartbeats(
            data.draw(st.sampled_from(self._with(Status.JOINING, Status.TRAINING)))
        )

    @rule(seconds=st.sampled_from([0.1, 0.5, 1.0, 2.5, 4.0, 10.0]))
    def advance(self, seconds: float) -> None:
        self.cluster.advance(seconds)

    @precondition(lambda self: self._with(Status.TRAINING) and not self.closed_by_rule)
    @rule(data=st.data())
    def close(self, data: st.DataObject) -> None:
        self.cluster.close(data.draw(st.sampled_from(self._with(Status.TRAINING))))
        self.closed_by_rule = True
        self.results_at_close = {r for r, res in self.cluster.results().items() if not res.closed}

    @rule()
    def quiesce(self) -> None:
        """Faults stop; after enough virtual time every eligible node trains in one round."""
        eligible = [
            name
            for name, node in self.cluster.nodes.items()
            if node.beating and node.status in (Status.JOINING, Status.TRAINING)
        ]
        if self.closed_by_rule or len(eligible) < self.config.min_nodes:
            return
        self.cluster.advance(8 * (TIMEOUT + LAST_CALL + INTERVAL))
        training = self._with(Status.TRAINING)
        rounds = self.cluster.training_rounds()
        inv_R9_rounds_complete_once_faults_stop(self, eligible, training, rounds)

    @invariant()
    def inv_R1_ranks_are_dense_and_agreed(self) -> None:
        """Ranks of a completed round are exactly 0..n-1, unique, and agreed by all participants."""
        results = self.cluster.results()
        for node in self.cluster.nodes.values():
            if node.status is Status.TRAINING and node.world is not None:
                stored = results[node.world.round_no]
                assert node.world == stored, f"{node.name} holds a result the store does not"
                ranks = [stored.rank_of(p.node) for p in stored.participants]
                assert ranks == list(range(stored.world_size))
                assert stored.rank_of(node.name) is not None

    @invariant()
    def inv_R2_rounds_never_go_backwards(self) -> None:
        """The rounds a node completes strictly increase."""
        for node in self.cluster.nodes.values():
            done = node.completed_rounds
            assert all(a < b for a, b in zip(done, done[1:], strict=False)), f"{node.name}: {done}"

    @invariant()
    def inv_R3_no_node_is_participant_and_waiting(self) -> None:
        """A node training in round r holds no arrival slot in round r+1."""
        store, keys = self.cluster.store, self.cluster.keys
        for node in self.cluster.nodes.values():
            if node.status is Status.TRAINING and node.world is not None:
                prefix = keys.round_prefix(node.world.round_no + 1) + "/slot/"
                waiting = [decode_node(v).node for k, v in store.items() if k.startswith(prefix)]
                assert node.name not in waiting

    @invariant()
    def inv_R4_round_size_within_bounds(self) -> None:
        """Every completed round has min_nodes <= size <= max_nodes."""
        for result in self.cluster.results().values():
            if not result.closed:
                assert self.config.min_nodes <= result.world_size <= self.config.max_nodes

    @invariant()
    def inv_R5_closed_rendezvous_admits_nobody(self) -> None:
        """After a close, no round completes and nobody trains in a new world."""
        if self.results_at_close is None:
            return
        now = {r for r, res in self.cluster.results().items() if not res.closed}
        assert now == self.results_at_close, "a round completed after the close"

    @invariant()
    def inv_R6_leaving_never_closes(self) -> None:
        """Only an explicit close (a terminal outcome) closes the rendezvous; leaves never do."""
        closed = self.cluster.keys.closed() in self.cluster.store
        assert closed == self.closed_by_rule

    @invariant()
    def inv_R7_one_world_at_a_time(self) -> None:
        """At no moment do nodes of two different rounds train side by side."""
        assert not self.cluster.overlaps, self.cluster.overlaps[0]

    @invariant()
    def inv_R16_restart_counts_carry_the_attempts(self) -> None:
        """A round's count is the previous round's, plus the highest in-place attempt of it its
        members report, plus at most one for a failure reported for the round."""
        results, store, keys = self.cluster.results(), self.cluster.store, self.cluster.keys
        for r, result in results.items():
            previous = results.get(r - 1)
            if result.closed or previous is None or previous.closed:
                continue
            carried = max(
                (p.prev_attempt for p in result.participants if p.prev_round == r - 1), default=0
            )
            assert carried <= self._highest_opened(r - 1)
            base = previous.restart_count + carried
            failed = keys.failures(r) in store
            assert base <= result.restart_count <= base + (1 if failed else 0), (r, result)

    @invariant()
    def inv_R17_members_run_the_newest_attempt(self) -> None:
        """With no latency, every member that reaches the store runs the newest attempt of its
        round once the moment settles; no member runs an attempt nobody opened."""
        for node in self.cluster.nodes.values():
            if node.status is not Status.TRAINING or node.world is None:
                continue
            newest = self._highest_opened(node.world.round_no)
            assert node.attempt <= newest, f"{node.name} runs an attempt nobody opened"
            if node.beating:
                assert node.attempt == newest, f"{node.name} runs {node.attempt} of {newest}"

    def _highest_opened(self, round_no: int) -> int:
        attempt = 0
        while self.cluster.keys.attempt(round_no, attempt + 1) in self.cluster.store:
            attempt += 1
        return attempt


def inv_R9_rounds_complete_once_faults_stop(
    machine: RendezvousCluster, eligible: list[str], training: list[str], rounds: frozenset[int]
) -> None:
    """Once faults stop and at least min_nodes keep heartbeating, they form one round."""
    expected = min(len(eligible), machine.config.max_nodes)
    assert len(rounds) == 1, f"training rounds {sorted(rounds)}; log:\n" + "\n".join(
        machine.cluster.log[-30:]
    )
    assert len(training) == expected, (
        f"{len(training)} training, expected {expected} of {eligible}; log:\n"
        + "\n".join(machine.cluster.log[-30:])
    )


TestRendezvousCluster = RendezvousCluster.TestCase
