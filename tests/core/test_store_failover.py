"""The store failover table: the quorum rule, the moves between candidates, and an explorer over
store-host deaths, partitions and returning hosts that checks specs/store_failover.md."""

from __future__ import annotations

import itertools

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from tpelastic.core import store_failover as fo
from tpelastic.core.values import Rejected

CANDIDATES = ("h1:29400", "h2:29400", "h3:29400")
CONFIG = fo.FailoverConfig(candidates=CANDIDATES, max_nodes=3)


def _arrivals(*pairs: tuple[str, fo.KnownRound | None]) -> tuple[fo.Arrival, ...]:
    return tuple(fo.Arrival(node=n, known=k) for n, k in pairs)


R0 = fo.KnownRound(round=0, members=frozenset({"a", "b", "c"}))


def _next(
    arrivals: tuple[fo.Arrival, ...], stored: fo.KnownRound | None = None
) -> fo.KnownRound | None:
    return fo.next_round(arrivals, CONFIG.max_nodes, stored)


def test_F1_a_round_forms_only_with_a_strict_majority_of_the_latest_known_round() -> None:
    assert _next(_arrivals(("a", R0), ("b", R0))) == fo.KnownRound(
        round=1, members=frozenset({"a", "b"})
    )
    assert _next(_arrivals(("c", R0))) is None  # 1 of 3
    even = fo.KnownRound(round=4, members=frozenset({"a", "b", "c", "d"}))
    assert _next(_arrivals(("a", even), ("b", even))) is None  # half is no majority
    # A newcomer joins the round but does not count toward the majority.
    assert _next(_arrivals(("c", R0), ("new", None))) is None
    # The latest round any arrival knows decides, whatever the others remember.
    r1 = fo.KnownRound(round=1, members=frozenset({"a", "b"}))
    assert _next(_arrivals(("a", r1), ("c", R0))) is None  # 1 of r1's 2
    assert _next(_arrivals(("a", r1), ("b", r1), ("c", R0))) == fo.KnownRound(
        round=2, members=frozenset({"a", "b", "c"})
    )
    assert _next(()) is None
    # Round 0 needs a strict majority of max_nodes.
    assert _next(_arrivals(("a", None))) is None
    assert _next(_arrivals(("a", None), ("b", None))) == fo.KnownRound(
        round=0, members=frozenset("ab")
    )
    # What the store holds counts as known: a late node does not start a round 0 of its own.
    assert _next(_arrivals(("late", None)), stored=R0) is None


def test_F2_a_lost_store_moves_to_the_next_candidate_and_wraps_around() -> None:
    state = fo.FailoverState(node="a", phase=fo.FailoverPhase.TRAINING, at=2, known=R0)
    done = fo.step(state, fo.StoreLost(now=1.0), CONFIG)
    assert done.state.phase is fo.FailoverPhase.SEEKING and done.state.at == 0
    assert done.effects == (fo.StopWorkers(), fo.ConnectTo(candidate=0))
    done = fo.step(done.state, fo.CandidateDown(now=2.0), CONFIG)
    assert done.state.at == 1 and done.effects == (fo.ConnectTo(candidate=1),)
    done = fo.step(done.state, fo.CandidateUp(now=3.0), CONFIG)
    assert done.state.phase is fo.FailoverPhase.JOINING
    assert done.effects == (fo.JoinAt(candidate=1, known=R0),)


def test_F3_before_its_first_round_a_node_stays_on_the_first_candidate() -> None:
    fresh = fo.FailoverState(node="a")
    done = fo.step(fresh, fo.StoreLost(now=1.0), CONFIG)
    assert done.state.at == 0 and done.effects == (fo.ConnectTo(candidate=0),)
    assert isinstance(fo.step(fresh, fo.NoQuorumYet(now=1.0), CONFIG).effects[0], Rejected)


def test_F1_no_majority_waits_and_says_how_many_came() -> None:
    state = fo.FailoverState(node="c", known=R0)
    done = fo.step(state, fo.ArrivalsSeen(now=1.0, arrivals=_arrivals(("c", R0))), CONFIG)
    assert done.state == state and done.effects == (fo.AwaitMajority(have=1, of=3),)


# -- the explorer ------------------------------------------------------------------------------

NODES = ("a", "b", "c", "d", "e")


class FailoverExplorer(RuleBasedStateMachine):
    """Nodes step the real table; the world around them is the model.

    Candidate stores die and return (empty); a partition splits the nodes in two sides and puts
    each candidate on one side; a side reaches only its own candidates and nodes. Deliveries are
    chosen by hypothesis, so a node may notice a loss late (an old world keeps its phase until
    it is told), as a real agent notices only at its keep-alive expiry.
    """

    def __init__(self) -> None:
        super().__init__()
        self.nodes: dict[str, fo.FailoverState] = {}
        self.up = [True, True, True]
        self.side: dict[str, int] = {}
        self.store_side = [0, 0, 0]
        self.results: list[fo.KnownRound | None] = [None, None, None]  # each store's latest
        self.formed: dict[int, frozenset[str]] = {}
        self.clock = itertools.count()
        self.config = CONFIG

    @initialize(count=st.integers(min_value=2, max_value=5))
    def start(self, count: int) -> None:
        # Every node the job may have is started: round 0 needs a majority of them.
        self.config = fo.FailoverConfig(candidates=CANDIDATES, max_nodes=count)
        for node in NODES[:count]:
            self.nodes[node] = fo.FailoverState(node=node)
            self.side[node] = 0

    def _reach(self, node: str, candidate: int) -> bool:
        return self.up[candidate] and self.store_side[candidate] == self.side[node]

    def _step(self, node: str, event: object) -> None:
        done = fo.step(self.nodes[node], event, self.config)
        self.nodes[node] = done.state

    @rule(candidate=st.integers(0, 2))
    def store_host_dies(self, candidate: int) -> None:
        self.up[candidate] = False
        self.results[candidate] = None  # its state dies with it

    @rule(candidate=st.integers(0, 2))
    def store_host_returns_empty(self, candidate: int) -> None:
        self.up[candidate] = True

    @rule(data=st.data())
    def partition(self, data: st.DataObject) -> None:
        for node in self.nodes:
            self.side[node] = data.draw(st.integers(0, 1))
        self.store_side = [data.draw(st.integers(0, 1)) for _ in range(3)]

    @rule()
    def heal(self) -> None:
        self.side = dict.fromkeys(self.side, 0)
        self.store_side = [0, 0, 0]

    @rule(data=st.data())
    def deliver(self, data: st.DataObject) -> None:
        node = data.draw(st.sampled_from(sorted(self.nodes)))
        self.observe(node, give_up=data.draw(st.booleans()))

    def observe(self, node: str, *, give_up: bool = False) -> None:
        """What ``node`` observes next: its candidate up or down, its store lost, its peers
        lost, or who waits with it (``give_up``: no majority came for a while instead)."""
        state, now = self.nodes[node], float(next(self.clock))
        if state.phase is fo.FailoverPhase.SEEKING:
            up = self._reach(node, state.at)
            self._step(node, fo.CandidateUp(now=now) if up else fo.CandidateDown(now=now))
        elif not self._reach(node, state.at):
            self._step(node, fo.StoreLost(now=now))
        elif state.phase is fo.FailoverPhase.TRAINING:
            assert state.known is not None
            if any(self.side[m] != self.side[node] for m in state.known.members if m in self.side):
                self._step(node, fo.PeersLost(now=now))
        elif give_up:
            self._step(node, fo.NoQuorumYet(now=now))
        else:
            self._look(node, now)

    def _look(self, node: str, now: float) -> None:
        """The node reads who waits at its candidate; a round that forms there is taken by every
        node waiting there (its result names only them)."""
        at = self.nodes[node].at
        waiting = [
            n
            for n, s in sorted(self.nodes.items())
            if s.phase is fo.FailoverPhase.JOINING and s.at == at and self._reach(n, at)
        ]
        arrivals = tuple(fo.Arrival(node=n, known=self.nodes[n].known) for n in waiting)
        stored = self.results[at]
        formed = fo.next_round(arrivals, self.config.max_nodes, stored) if node in waiting else None
        for n in waiting if formed is not None else [node]:
            self._step(n, fo.ArrivalsSeen(now=now, arrivals=arrivals, stored=stored))
        if formed is not None:
            self.results[at] = formed
            # F4: a round number forms once: never two memberships for one number.
            assert self.formed.setdefault(formed.round, formed.members) == formed.members
            # F1: its members hold a strict majority of the round before it.
            before = self.formed.get(formed.round - 1)
            if formed.round > 0:
                assert before is not None, f"round {formed.round} formed without its predecessor"
                assert 2 * len(formed.members & before) > len(before)

    @invariant()
    def F5_never_two_worlds_train(self) -> None:
        """A world trains while all its members are in it and reach each other (their
        collectives go through); at most one world trains at any time."""
        training: dict[int, set[str]] = {}
        for node, state in self.nodes.items():
            if state.phase is fo.FailoverPhase.TRAINING and state.known is not None:
                training.setdefault(state.known.round, set()).add(node)
        worlds = [
            r
            for r, nodes in training.items()
            if nodes == set(self.formed[r]) and len({self.side[n] for n in nodes}) == 1
        ]
        assert len(worlds) <= 1, {r: sorted(training[r]) for r in worlds}

    @invariant()
    def known_rounds_were_formed(self) -> None:
        for state in self.nodes.values():
            if state.known is not None:
                assert self.formed.get(state.known.round) == state.known.members


def test_F4_F5_the_explorer_finds_no_two_worlds_and_no_split_round() -> None:
    run_state_machine_as_test(
        FailoverExplorer,
        settings=settings(max_examples=40, stateful_step_count=40, deadline=None),
    )


def _settle(explorer: FailoverExplorer, nodes: list[str], rounds: int = 40) -> None:
    """Let ``nodes`` observe in turn, never giving up on a candidate, until nothing changes."""
    for _ in range(rounds):
        for node in nodes:
            explorer.observe(node)


def test_F6_survivors_of_the_store_host_train_again_and_a_minority_never_does() -> None:
    explorer = FailoverExplorer()
    explorer.start(3)
    _settle(explorer, ["a", "b", "c"])
    assert {s.known.round for s in explorer.nodes.values() if s.known} == {0}
    # Store host h1 dies with node a: b and c move to h2 and form round 1 there.
    explorer.store_host_dies(0)
    del explorer.nodes["a"]
    _settle(explorer, ["b", "c"])
    assert {n: (s.phase, s.at, s.known) for n, s in explorer.nodes.items()} == {
        n: (fo.FailoverPhase.TRAINING, 1, fo.KnownRound(round=1, members=frozenset("bc")))
        for n in "bc"
    }
    # A partition b | c with h2 on b's side: neither side of one can form round 2.
    explorer.side["c"] = 1
    explorer.store_side = [0, 0, 1]
    _settle(explorer, ["b", "c"])
    assert 2 not in explorer.formed


def test_F6_a_partition_of_one_against_two_lets_only_the_two_train() -> None:
    explorer = FailoverExplorer()
    explorer.start(3)
    _settle(explorer, ["a", "b", "c"])
    # a keeps h1; b and c are cut off with h2 and h3.
    explorer.side.update(a=0, b=1, c=1)
    explorer.store_side = [0, 1, 1]
    for node in "abc":  # everyone notices: the old world stops
        explorer._step(node, fo.PeersLost(now=float(next(explorer.clock))))
    _settle(explorer, ["a", "b", "c"])
    states = explorer.nodes
    assert states["b"].phase is fo.FailoverPhase.TRAINING and states["b"].at == 1
    assert states["b"].known == fo.KnownRound(round=1, members=frozenset("bc"))
    assert states["a"].phase is not fo.FailoverPhase.TRAINING  # alone it never forms
    assert sorted(explorer.formed) == [0, 1]
