"""Agents and the job-wide restart budget, driven together through random runs.

A few agents (the real ``agent.step``) and a tiny pure *rounds oracle* stand in for a cluster: the
oracle completes rounds from the nodes that joined, computing each round's restart count with the
real ``next_restart_count`` (after carrying the in-place attempts of the round before), and turns
the agents' effects (join, open next round, open an attempt, close, leave) into the observations
the other agents would make. Half the runs restart in place (``restart_in_place``). Random rules
inject worker failures (also two at once), hangs, successes, nodes joining, dying and leaving on
signals, and rendezvous timeouts. Invariants are
named after the spec ids in specs/restart_budget.md and specs/agent.md.
"""

from __future__ import annotations

from collections import deque

from attrs import define, field
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from tpelastic.core import agent as ag
from tpelastic.core.agent import AgentPhase as P
from tpelastic.core.restart_budget import (
    attempts_allowed,
    can_restart,
    charged_attempt,
    next_restart_count,
)
from tpelastic.core.table import Step
from tpelastic.core.values import Rejected
from tpelastic.core.worker_group import WorkerFailure

FAILURE_EVENTS = (ag.WorkersFailed, ag.WorkerStuck)
MEMBERSHIP_EVENTS = (ag.AgentStarted, ag.NodesWaiting, ag.NextRoundOpened, ag.KeepAliveLapsed)
MAX_NODES_EVER = 6
MAX_DEPARTURES = 2


@define
class Record:
    node: str
    before: ag.AgentState
    event: ag.AgentEventT
    result: Step[ag.AgentState]


@define
class Oracle:
    """The rendezvous as the agents see it: rounds, joiners and the job-wide restart count."""

    round: int = -1
    restart_count: int = 0
    members: tuple[str, ...] = ()
    joiners: dict[str, bool] = field(factory=dict)  # node -> reported a failure
    # member of the last round -> the highest attempt of it its join reports as spent
    reported: dict[str, int] = field(factory=dict)
    opened: bool = False  # a next round was opened after `round`
    closed: str | None = None
    counts: list[int] = field(factory=list)  # restart count of each completed round
    failure_rounds: list[bool] = field(factory=list)  # did a failure report go into the round
    attempts: list[int] = field(factory=list)  # highest in-place attempt opened in each round
    carried: list[int] = field(factory=list)  # the attempts of each round the next one counted
    spent: int = 0  # units spent job-wide: attempts opened plus rounds a failure went into
    refunded: int = 0  # attempts a peer's loss caused, left out of the next round's count

    @property
    def attempt(self) -> int:
        return self.attempts[-1] if self.attempts else 0


class AgentsAndBudget(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.agents: dict[str, ag.AgentState] = {}
        self.dead: set[str] = set()
        self.oracle = Oracle()
        self.now = 0.0
        self.records: list[Record] = []
        self.departures = 0  # nodes that died or left on a signal: a few per run keep it going
        self.cursors: dict[str, int] = {}  # per invariant: records it has already checked
        self.starts: dict[str, list[ag.StartWorkers]] = {}
        self.config = ag.AgentConfig(max_restarts=0, min_nodes=1, max_nodes=1)

    # -- plumbing ---------------------------------------------------------------------------

    def live(self, *phases: P) -> list[str]:
        """Nodes alive and in one of ``phases`` (default: any phase that is not terminal)."""
        wanted = phases or (P.INIT, P.RENDEZVOUS, P.RUNNING, P.HOLDING, P.EXIT_BARRIER)
        return sorted(n for n, s in self.agents.items() if n not in self.dead and s.phase in wanted)

    def deliver(self, node: str, event: ag.AgentEventT) -> None:
        """Feed one observation and everything it causes, in order."""
        self.deliver_all([(node, event)])

    def deliver_all(self, first: list[tuple[str, ag.AgentEventT]]) -> None:
        """Feed observations made at once, then everything they cause, in order."""
        queue: deque[tuple[str, ag.AgentEventT]] = deque(first)
        while queue:
            target, observed = queue.popleft()
            if target in self.dead or self.agents[target].phase in (P.SUCCEEDED, P.FAILED):
                continue
            before = self.agents[target]
            result = ag.step(before, observed, self.config)
            self.records.append(Record(target, before, observed, result))
            self.agents[target] = result.state
            if result.state.phase in (P.SUCCEEDED, P.FAILED):
                self.oracle.joiners.pop(target, None)
            for effect in result.effects:
                queue.extend(self.carry_out(target, before, effect))

    def carry_out(
        self, node: str, before: ag.AgentState, effect: object
    ) -> list[tuple[str, ag.AgentEventT]]:
        """What the rest of the world observes because ``node`` carried out ``effect``."""
        oracle, now = self.oracle, self.now
        if isinstance(effect, Rejected):
            raise AssertionError(f"the cluster fed {node} an event it rejects: {effect}")
        if isinstance(effect, ag.StartWorkers):
            self.starts.setdefault(node, []).append(effect)
        elif isinstance(effect, ag.JoinRendezvous):
            oracle.joiners[node] = oracle.joiners.get(node, False) or effect.failure
            if node in oracle.members:
                charged = effect.charged_attempt
                oracle.reported[node] = oracle.attempt if charged is None else charged
                return self.fence_members(node, "failure" if effect.failure else "rejoin")
        elif isinstance(effect, ag.OpenNextRound):
            return self.fence_members(node, effect.reason)
        elif isinstance(effect, ag.OpenAttempt):
            return self.open_attempt(node, effect)
        elif isinstance(effect, ag.LeaveRendezvous):
            oracle.joiners.pop(node, None)
            if node in oracle.members:
                return self.fence_members(node, ag.PEER_LOST)
        elif isinstance(effect, ag.CloseRendezvous):
            oracle.closed = oracle.closed or effect.outcome
            outcome = oracle.closed
            closed = ag.RendezvousClosed(now=now, outcome=outcome, reason=f"closed by {node}")  # type: ignore[arg-type]
            joined = self.live(P.RENDEZVOUS, P.RUNNING, P.HOLDING, P.EXIT_BARRIER)
            return [(n, closed) for n in joined]
        return []

    def fence_members(self, by: str, reason: str) -> list[tuple[str, ag.AgentEventT]]:
        """A new round opens: every other member still in the old world is fenced out."""
        self.oracle.opened = True
        opened = ag.NextRoundOpened(now=self.now, round=self.oracle.round + 1, reason=reason)
        return [
            (n, opened)
            for n in self.oracle.members
            if n != by and n in self.live(P.RUNNING, P.HOLDING, P.EXIT_BARRIER)
        ]

    def open_attempt(self, by: str, effect: ag.OpenAttempt) -> list[tuple[str, ag.AgentEventT]]:
        """The attempt key is set if absent: only its first writer makes the others restart."""
        oracle = self.oracle
        assert effect.round == oracle.round, effect
        # The open landed (its keep-alive held: this harness loses no heartbeat): the opener
        # starts the attempt's workers.
        own = ag.OwnAttemptOpened(now=self.now, round=effect.round, attempt=effect.attempt)
        if effect.attempt <= oracle.attempt:
            return [(by, own)]  # a member failing at once opened the same one: nothing spent
        assert effect.attempt == oracle.attempt + 1, effect  # attempts are opened in order
        oracle.attempts[-1] = effect.attempt
        oracle.spent += 1
        seen = ag.AttemptOpened(
            now=self.now, round=effect.round, attempt=effect.attempt, reason=effect.reason
        )
        return [(by, own)] + [
            (n, seen)
            for n in oracle.members
            if n != by and n in self.live(P.RUNNING, P.EXIT_BARRIER)
        ]

    def add_node(self) -> None:
        node = f"n{len(self.agents)}"
        self.agents[node] = ag.initial_state(self.config)
        self.deliver(node, ag.AgentStarted(now=self.now))

    # -- rules ------------------------------------------------------------------------------

    @initialize(
        max_restarts=st.integers(0, 3),
        min_nodes=st.integers(1, 2),
        extra=st.integers(0, 2),
        nodes=st.integers(0, 2),
        in_place=st.booleans(),
        window=st.sampled_from([0.0, 1.2, 30.0]),
    )
    def start(
        self,
        max_restarts: int,
        min_nodes: int,
        extra: int,
        nodes: int,
        in_place: bool,
        window: float,
    ) -> None:
        nodes += min_nodes  # enough nodes to form the first world
        self.config = ag.AgentConfig(
            max_restarts=max_restarts,
            min_nodes=min_nodes,
            max_nodes=min_nodes + extra,
            local_world_size=2,
            restart_in_place=in_place,
            collateral_window=window,
        )
        for _ in range(nodes):
            self.add_node()

    @rule(dt=st.floats(0.5, 30))
    def tick(self, dt: float) -> None:
        self.now += dt

    @precondition(
        lambda self: (
            self.oracle.closed is None
            and len(self.oracle.joiners) >= self.config.min_nodes
            and not self.live(P.RUNNING, P.EXIT_BARRIER)
        )
    )
    @rule()
    def complete_round(self) -> None:
        oracle = self.oracle
        members = tuple(sorted(oracle.joiners)[: self.config.max_nodes])
        failed = any([oracle.joiners.pop(n) for n in members])
        oracle.round += 1
        # The closer carries the last round's in-place attempts its members report as spent
        # into the new round's count (a peer's loss may have refunded the newest).
        reports = [oracle.reported[n] for n in members if n in oracle.reported]
        attempts = max(reports, default=oracle.attempt)
        if oracle.attempts:
            oracle.carried.append(attempts)
            oracle.refunded += oracle.attempt - attempts
        oracle.reported = {}
        oracle.restart_count = next_restart_count(oracle.restart_count + attempts, failed)
        oracle.spent += 1 if failed else 0
        oracle.members, oracle.opened = members, False
        oracle.counts.append(oracle.restart_count)
        oracle.failure_rounds.append(failed)
        oracle.attempts.append(0)
        for rank, node in enumerate(members):
            done = ag.RoundCompleted(
                now=self.now,
                round=oracle.round,
                group_rank=rank,
                group_world_size=len(members),
                restart_count=oracle.restart_count,
            )
            self.deliver(node, done)

    @precondition(lambda self: self.live(P.RUNNING))
    @rule(data=st.data(), stuck=st.booleans())
    def workers_fail(self, data: st.DataObject, stuck: bool) -> None:
        node = data.draw(st.sampled_from(self.live(P.RUNNING)))
        rank = data.draw(st.integers(0, self.config.local_world_size - 1))
        if stuck:
            self.deliver(node, ag.WorkerStuck(now=self.now, local_rank=rank, idle_for=60.0))
            return
        failure = WorkerFailure(
            local_rank=rank, global_rank=rank, exitcode=1, signal=None, at=self.now, reason="exit 1"
        )
        self.deliver(node, ag.WorkersFailed(now=self.now, failures=(failure,)))

    @precondition(lambda self: len(self.live(P.RUNNING)) >= 2)
    @rule(data=st.data())
    def two_members_fail_at_once(self, data: st.DataObject) -> None:
        """Both fail before either sees the other's restart: in place, they open one attempt."""
        pair = data.draw(
            st.lists(st.sampled_from(self.live(P.RUNNING)), min_size=2, max_size=2, unique=True)
        )
        failure = WorkerFailure(
            local_rank=0, global_rank=0, exitcode=1, signal=None, at=self.now, reason="exit 1"
        )
        self.deliver_all([(n, ag.WorkersFailed(now=self.now, failures=(failure,))) for n in pair])

    @precondition(lambda self: self.live(P.HOLDING))
    @rule()
    def time_passes_while_holding(self) -> None:
        for node in self.live(P.HOLDING):
            self.deliver(node, ag.TimePassed(now=self.now))

    @precondition(lambda self: self.live(P.RUNNING))
    @rule(data=st.data())
    def workers_succeed(self, data: st.DataObject) -> None:
        self.deliver(
            data.draw(st.sampled_from(self.live(P.RUNNING))), ag.WorkersSucceeded(now=self.now)
        )

    @precondition(
        lambda self: (
            self.oracle.members
            and all(
                self.agents[n].phase is P.EXIT_BARRIER
                for n in self.oracle.members
                if n not in self.dead
            )
            and any(n not in self.dead for n in self.oracle.members)
        )
    )
    @rule()
    def exit_barrier_passes(self) -> None:
        for node in self.oracle.members:
            if self.agents[node].phase is P.EXIT_BARRIER:  # the first one through closes
                world = self.agents[node].group_world_size
                self.deliver(node, ag.ExitBarrierRead(now=self.now, arrived=world))

    @precondition(lambda self: self.live(P.EXIT_BARRIER))
    @rule(data=st.data())
    def exit_barrier_times_out(self, data: st.DataObject) -> None:
        self.now += self.config.exit_barrier_timeout  # past every barrier's timeout
        self.deliver(
            data.draw(st.sampled_from(self.live(P.EXIT_BARRIER))),
            ag.ExitBarrierRead(now=self.now, arrived=0),
        )

    @precondition(lambda self: self.oracle.closed is None and len(self.agents) < MAX_NODES_EVER)
    @rule()
    def node_joins(self) -> None:
        self.add_node()

    @precondition(lambda self: self.live(P.RUNNING))
    @rule(data=st.data())
    def nodes_waiting_seen(self, data: st.DataObject) -> None:
        node = data.draw(st.sampled_from(self.live(P.RUNNING)))
        waiting = sum(1 for n in self.oracle.joiners if n not in self.oracle.members)
        self.deliver(node, ag.NodesWaiting(now=self.now, count=waiting))

    @precondition(lambda self: self.live() and self.departures < MAX_DEPARTURES)
    @rule(data=st.data())
    def node_dies(self, data: st.DataObject) -> None:
        node = data.draw(st.sampled_from(self.live()))
        self.dead.add(node)
        self.departures += 1
        self.oracle.joiners.pop(node, None)
        if node in self.oracle.members:  # the rendezvous notices the lost heartbeat
            for target, event in self.fence_members(node, ag.PEER_LOST):
                self.deliver(target, event)

    @precondition(
        lambda self: (
            len(self.live(P.RUNNING)) >= 2
            and self.departures < MAX_DEPARTURES
            and set(self.live(P.RUNNING)) <= set(self.oracle.members)
        )
    )
    @rule(data=st.data(), reported_after=st.floats(0, 2))
    def a_member_dies_under_its_peers(self, data: st.DataObject, reported_after: float) -> None:
        """A member dies with its workers: the survivors' workers fail at once on the lost
        peer, and the death is reported ``reported_after`` collateral windows later."""
        victim = data.draw(st.sampled_from(self.live(P.RUNNING)))
        self.dead.add(victim)
        self.departures += 1
        self.oracle.joiners.pop(victim, None)
        failure = WorkerFailure(
            local_rank=0, global_rank=0, exitcode=1, signal=None, at=self.now, reason="peer gone"
        )
        failed = ag.WorkersFailed(now=self.now, failures=(failure,))
        self.deliver_all([(n, failed) for n in self.live(P.RUNNING)])
        self.now += reported_after * self.config.collateral_window
        for target, event in self.fence_members(victim, ag.PEER_LOST):
            self.deliver(target, event)

    @precondition(lambda self: self.live(P.RUNNING))
    @rule(data=st.data())
    def keep_alive_lapses(self, data: st.DataObject) -> None:
        """A member was paused (or could not reach the store) past its keep-alive."""
        node = data.draw(st.sampled_from(self.live(P.RUNNING)))
        self.deliver(node, ag.KeepAliveLapsed(now=self.now, reason="paused"))

    @precondition(lambda self: self.live(P.FENCED))
    @rule(data=st.data())
    def keep_alive_restored(self, data: st.DataObject) -> None:
        """A fenced node's heartbeat landed again (the store answers it)."""
        self.deliver(
            data.draw(st.sampled_from(self.live(P.FENCED))), ag.KeepAliveRestored(now=self.now)
        )

    @precondition(lambda self: self.live() and self.departures < MAX_DEPARTURES)
    @rule(data=st.data(), signum=st.sampled_from([2, 15]))
    def signal(self, data: st.DataObject, signum: int) -> None:
        self.departures += 1
        self.deliver(
            data.draw(st.sampled_from(self.live())), ag.SignalReceived(now=self.now, signum=signum)
        )

    @precondition(
        lambda self: (
            self.live(P.RENDEZVOUS)
            and not self.live(P.RUNNING, P.EXIT_BARRIER)
            and len(self.oracle.joiners) < self.config.min_nodes
        )
    )
    @rule()
    def rendezvous_times_out(self) -> None:
        for node in self.live(P.RENDEZVOUS):
            failed = ag.RendezvousFailed(now=self.now, reason="too few nodes", kind="timeout")
            self.deliver(node, failed)

    @precondition(lambda self: len(self.records) >= 25)  # let faults pile up first
    @rule()
    def liveness_A7_settles_once_faults_stop(self) -> None:
        """Once faults stop, every live agent ends; if the job then succeeds, so do they all."""
        live_before = self.live()
        for _ in range(4 * MAX_NODES_EVER):
            if self.live(P.RUNNING):
                for node in self.live(P.RUNNING):
                    self.deliver(node, ag.WorkersSucceeded(now=self.now))
            elif self.live(P.FENCED):
                for node in self.live(P.FENCED):
                    self.deliver(node, ag.KeepAliveRestored(now=self.now))
            elif self.live(P.HOLDING):
                self.now += self.config.collateral_window
                self.time_passes_while_holding()
            elif self.live(P.EXIT_BARRIER):
                self.exit_barrier_passes()
            elif self.live(P.RENDEZVOUS):
                if self.oracle.closed is None and len(self.oracle.joiners) >= self.config.min_nodes:
                    self.complete_round()
                else:
                    self.rendezvous_times_out()
            else:
                break
        assert not self.live(P.INIT, P.RENDEZVOUS, P.RUNNING, P.EXIT_BARRIER, P.FENCED), self.agents
        if self.oracle.closed == "succeeded":
            assert all(self.agents[n].exit_code == 0 for n in live_before)

    # -- invariants -------------------------------------------------------------------------

    def new_records(self, invariant_name: str) -> list[Record]:
        """The records ``invariant_name`` has not checked yet (each step is checked once)."""
        start = self.cursors.get(invariant_name, 0)
        self.cursors[invariant_name] = len(self.records)
        return self.records[start:]

    @invariant()
    def inv_B1_restarts_never_exceed_max(self) -> None:
        """Restarts used never exceed max_restarts, job-wide or in any agent's view."""
        k = self.config.max_restarts
        assert self.oracle.restart_count + self.oracle.attempt <= k
        assert all(s.restart_count <= k for s in self.agents.values())

    @invariant()
    def inv_B2_at_most_k_plus_1_attempts(self) -> None:
        """A job with budget k makes at most k+1 attempts (distinct restart counts started)."""
        allowed = attempts_allowed(self.config.max_restarts)
        everywhere = {s.restart_count for starts in self.starts.values() for s in starts}
        assert len(everywhere) <= allowed
        for starts in self.starts.values():
            assert len({s.restart_count for s in starts}) <= allowed

    @invariant()
    def inv_B5_restart_count_never_decreases(self) -> None:
        """The restart count never goes down and rises only in a round a failure went into."""
        counts, failures = self.oracle.counts, self.oracle.failure_rounds
        carried = self.oracle.carried
        for i in range(1, len(counts)):
            assert counts[i] - counts[i - 1] == carried[i - 1] + (1 if failures[i] else 0)
        for starts in self.starts.values():
            # A refunded attempt's count is not carried on (B7): the others never go down.
            kept = [s for s in starts if s.round >= len(carried) or s.attempt <= carried[s.round]]
            seen = [s.restart_count for s in kept]
            assert seen == sorted(seen)

    @invariant()
    def inv_B6_membership_changes_report_no_failure(self) -> None:
        """Joining, scale-up and being fenced out re-join without reporting a failure."""
        for record in self.new_records("inv_B6_membership_changes_report_no_failure"):
            if isinstance(record.event, MEMBERSHIP_EVENTS):
                joins = [e for e in record.result.effects if isinstance(e, ag.JoinRendezvous)]
                assert all(not j.failure for j in joins), record

    @invariant()
    def inv_A1_stop_workers_first(self) -> None:
        """StopWorkers precedes JoinRendezvous/OpenNextRound; leaving RUNNING stops workers."""
        for record in self.new_records("inv_A1_stop_workers_first"):
            kinds = [type(e) for e in record.result.effects]
            if ag.StopWorkers in kinds:
                first_stop = kinds.index(ag.StopWorkers)
                assert all(
                    kinds.index(k) > first_stop
                    for k in (ag.JoinRendezvous, ag.OpenNextRound)
                    if k in kinds
                )
            left_running = record.before.phase is P.RUNNING and record.result.state.phase not in (
                P.RUNNING,
                P.EXIT_BARRIER,
            )
            assert not left_running or kinds[:1] == [ag.StopWorkers], record

    @invariant()
    def inv_A12_fencing_is_not_failing(self) -> None:
        """A lapsed keep-alive stops the node's workers and fences it (no join while lapsed);
        once a heartbeat landed again it opens the next round and re-joins without reporting a
        failure: fencing never ends the agent, closes the job or spends budget."""
        for record in self.new_records("inv_A12_fencing_is_not_failing"):
            kinds = [type(e) for e in record.result.effects]
            after = record.result.state
            if isinstance(record.event, (ag.KeepAliveLapsed, ag.KeepAliveRestored)):
                assert after.restart_count == record.before.restart_count, record
                assert ag.CloseRendezvous not in kinds and ag.ReportFailure not in kinds, record
            if isinstance(record.event, ag.KeepAliveLapsed):
                assert after.phase is P.FENCED, record
                assert kinds[0] is ag.StopWorkers and ag.JoinRendezvous not in kinds, record
            elif isinstance(record.event, ag.KeepAliveRestored):
                assert record.before.phase is P.FENCED and after.phase is P.RENDEZVOUS, record
                assert kinds == [ag.OpenNextRound, ag.JoinRendezvous], record
                assert ag.JoinRendezvous(failure=False) in record.result.effects

    @invariant()
    def inv_A13_a_peer_lost_within_the_window_is_a_membership_change(self) -> None:
        """A failure with the budget spent in a world with peers is held (workers stopped,
        nothing closed) for the collateral window; a peer's loss meanwhile re-joins without a
        failure report or a unit spent; only the window's end fails the job for it."""
        for record in self.new_records(
            "inv_A13_a_peer_lost_within_the_window_is_a_membership_change"
        ):
            before, after = record.before, record.result.state
            effects = record.result.effects
            if after.phase is P.HOLDING and before.phase is P.RUNNING:
                assert isinstance(record.event, FAILURE_EVENTS), record
                assert not can_restart(before.restart_count, self.config.max_restarts)
                assert [type(e) for e in effects][:1] == [ag.StopWorkers], record
                assert not any(isinstance(e, ag.CloseRendezvous) for e in effects)
            if before.phase is not P.HOLDING:
                continue
            if isinstance(record.event, ag.NextRoundOpened):
                joins = [e for e in effects if isinstance(e, ag.JoinRendezvous)]
                assert len(joins) == 1 and not joins[0].failure, record
                assert not any(isinstance(e, ag.StopWorkers) for e in effects), record
            else:
                assert after.restart_count == before.restart_count
            closes = any(isinstance(e, ag.CloseRendezvous) for e in effects)
            if closes:
                assert isinstance(record.event, ag.TimePassed), record
                assert before.held_until is not None and record.event.now >= before.held_until

    @invariant()
    def inv_A15_a_peers_loss_refunds_the_attempts_it_caused(self) -> None:
        """A node whose round is superseded by a peer's loss re-joins reporting as spent only
        the in-place attempts it started more than collateral_window before, its own count
        lowered by the refunded ones; for any other reason it reports every attempt."""
        for record in self.new_records("inv_A15_a_peers_loss_refunds_the_attempts_it_caused"):
            event, before, after = record.event, record.before, record.result.state
            joins = [e for e in record.result.effects if isinstance(e, ag.JoinRendezvous)]
            if not isinstance(event, ag.NextRoundOpened) or not joins:
                assert all(j.charged_attempt is None for j in joins), record
                continue
            (join,) = joins
            window = self.config.collateral_window
            expected = before.attempt
            if event.reason == ag.PEER_LOST:
                expected = charged_attempt(before.attempt, before.attempt_starts, event.now, window)
            recent = [a for a, at in before.attempt_starts if event.now - at <= window]
            if expected == before.attempt:
                assert join == ag.JoinRendezvous(failure=False), record
                assert after.restart_count == before.restart_count
            else:
                assert event.reason == ag.PEER_LOST and window > 0 and recent, record
                assert join == ag.JoinRendezvous(failure=False, charged_attempt=expected)
                assert expected == min(recent) - 1
                assert after.restart_count == before.restart_count - (before.attempt - expected)

    @invariant()
    def inv_A2_signal_never_closes(self) -> None:
        """A signal never yields CloseRendezvous: the agent leaves, the others go on."""
        for record in self.new_records("inv_A2_signal_never_closes"):
            if isinstance(record.event, ag.SignalReceived):
                assert not any(isinstance(e, ag.CloseRendezvous) for e in record.result.effects)
                assert record.result.state.exit_code == 128 + record.event.signum

    @invariant()
    def inv_A3_failure_with_budget_left_continues(self) -> None:
        """A worker failure or hang with budget left never ends the job: in place, or re-joining."""
        for record in self.new_records("inv_A3_failure_with_budget_left_continues"):
            if not isinstance(record.event, FAILURE_EVENTS):
                continue
            effects = record.result.effects
            if can_restart(record.before.restart_count, self.config.max_restarts):
                assert not any(isinstance(e, ag.CloseRendezvous) for e in effects)
                if self.config.restart_in_place:
                    assert record.result.state.phase is P.RUNNING
                    assert any(isinstance(e, ag.OpenAttempt) for e in effects)
                else:
                    assert record.result.state.phase is P.RENDEZVOUS
                    assert ag.JoinRendezvous(failure=True) in effects
            elif record.result.state.phase is P.HOLDING:
                assert self.config.collateral_window > 0 and record.before.group_world_size > 1
            else:
                assert record.result.state.phase is P.FAILED
                assert (
                    ag.CloseRendezvous(outcome="failed", reason="workers failed, budget exhausted")
                    in effects
                )

    @invariant()
    def inv_A4_one_restart_count_per_round(self) -> None:
        """All agents of a round (and attempt) start their workers with the same restart count."""
        by_attempt: dict[tuple[int, int], set[int]] = {}
        for starts in self.starts.values():
            for s in starts:
                by_attempt.setdefault((s.round, s.attempt), set()).add(s.restart_count)
        assert all(len(counts) == 1 for counts in by_attempt.values())
        for (r, a), counts in by_attempt.items():
            if a == 0:
                assert counts == {self.oracle.counts[r]}

    @invariant()
    def inv_A5_exit_code_matches_phase(self) -> None:
        """An agent has an exit code iff terminal: 0 iff SUCCEEDED, else 1, 3 or 128+signum."""
        for state in self.agents.values():
            if state.phase is P.SUCCEEDED:
                assert state.exit_code == 0
            elif state.phase is P.FAILED:
                assert state.exit_code in (1, 3) or (state.exit_code or 0) > 128
            else:
                assert state.exit_code is None

    @invariant()
    def inv_A6_workers_start_only_in_a_fitting_round(self) -> None:
        """StartWorkers comes only from a fitting round: ranks in its world, count within budget."""
        for record in self.new_records("inv_A6_workers_start_only_in_a_fitting_round"):
            for effect in record.result.effects:
                if isinstance(effect, ag.StartWorkers):
                    in_place = (ag.OwnAttemptOpened, ag.AttemptOpened)
                    assert isinstance(record.event, ag.RoundCompleted) or (
                        self.config.restart_in_place and isinstance(record.event, in_place)
                    )
                    assert 0 <= effect.group_rank < effect.group_world_size <= self.config.max_nodes
                    assert effect.restart_count <= self.config.max_restarts

    @invariant()
    def inv_A9_in_place_restart_stops_the_old_attempt_first(self) -> None:
        """A step that starts workers again (in place) stops the old attempt's workers first;
        the failure that opens an attempt stops them and opens it, and its workers start only
        on the open's landing (``OwnAttemptOpened``), with nothing else in that step."""
        for record in self.new_records("inv_A9_in_place_restart_stops_the_old_attempt_first"):
            kinds = [type(e) for e in record.result.effects]
            if ag.OpenAttempt in kinds:
                assert kinds == [ag.StopWorkers, ag.OpenAttempt], record
            if ag.StartWorkers not in kinds or record.before.phase is P.RENDEZVOUS:
                continue
            if isinstance(record.event, ag.OwnAttemptOpened):
                assert kinds == [ag.StartWorkers], record
                continue
            assert kinds == [ag.StopWorkers, ag.StartWorkers], record

    @invariant()
    def inv_A10_attempt_count_is_rounds_plus_attempt(self) -> None:
        """Every node starts attempt n of a round with the round's restart count plus n, and
        every node running a round counts the same way in its own state."""
        for starts in self.starts.values():
            for s in starts:
                assert s.restart_count == self.oracle.counts[s.round] + s.attempt, s
        for node in self.live(P.RUNNING, P.EXIT_BARRIER):
            state = self.agents[node]
            assert state.restart_count == self.oracle.counts[state.round] + state.attempt, state

    @invariant()
    def inv_A11_a_failure_spends_one_unit_either_way(self) -> None:
        """A failure with budget left spends one unit job-wide, in place or by re-joining: the
        attempt it opens is the next one, its count one more; the job-wide count is the units
        spent (attempts opened plus rounds a failure went into)."""
        for record in self.new_records("inv_A11_a_failure_spends_one_unit_either_way"):
            opens = [e for e in record.result.effects if isinstance(e, ag.OpenAttempt)]
            if not opens:
                continue
            before, after = record.before, record.result.state
            assert opens == [
                ag.OpenAttempt(
                    round=before.round, attempt=before.attempt + 1, reason=opens[0].reason
                )
            ]
            assert after.restart_count == before.restart_count + 1
        oracle = self.oracle
        assert oracle.restart_count + oracle.attempt == oracle.spent - oracle.refunded


TestAgentsAndBudget = AgentsAndBudget.TestCase
