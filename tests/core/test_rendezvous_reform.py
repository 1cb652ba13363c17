"""Re-forming a round from the one before (core/rendezvous/reform.py), property-tested.

A world of round 0 is stored; one member leaves (or is found dead by its ring predecessor),
which proposes round 1; the others join from round 0 through the real join table over a dict
store, in an order hypothesis picks. Sometimes a second member dies silently as well, so the
proposal stalls and the round must end void, and round 2 forms the usual way.
"""

from __future__ import annotations

from attrs import frozen
from hypothesis import given, settings
from hypothesis import strategies as st

from tpelastic.core.rendezvous import join, membership
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.ops import (
    Get,
    JoinSucceeded,
    OpsDone,
    StoreOps,
    StoreWait,
    WaitEnded,
    run_ops,
)
from tpelastic.core.rendezvous.records import (
    NodeInfo,
    ProposalRecord,
    RoundResult,
    StateCorrupt,
    decode_proposal,
    decode_result,
    encode_proposal,
    encode_result,
)
from tpelastic.core.rendezvous.state import JoinPhase, JoinRequested, JoinState
from tpelastic.core.values import Rejected

KEYS = RunKeys("run")
CONFIG = RendezvousConfig(
    min_nodes=1,
    max_nodes=16,
    join_timeout=600.0,
    heartbeat_interval=1.0,
    heartbeat_timeout=3.0,
    last_call_timeout=0.5,
)


@frozen
class Run:
    """What one scenario ended with."""

    results: dict[int, RoundResult]
    completed: dict[str, RoundResult]
    requests: dict[str, int]  # store requests (batches and waits) per node until it completed
    confirmed_before_publish: bool
    reads: dict[str, list[str]]  # the keys each node read and found present
    ended: float  # the virtual time the last survivor completed


def _world(n: int) -> RoundResult:
    return RoundResult(round_no=0, participants=tuple(NodeInfo(node=f"n{i}") for i in range(n)))


def _run(
    n: int,
    gone: int,
    crash: bool,
    silent: int | None,
    order: list[int],
    held: bool = False,
    silent_leaves: bool = False,
) -> Run:
    """Round 0 of ``n``; rank ``gone`` leaves (or dies, found by its predecessor); the rank
    ``silent`` (if any) dies unnoticed; the others join from round 0 in ``order``."""
    world = _world(n)
    store: dict[str, bytes] = {KEYS.result(0): encode_result(world)}
    name = world.participants[gone].node
    if crash:
        reporter = world.participants[(gone - 1) % n].node
        run_ops(membership.report_dead_ops(KEYS, world, name, reporter=reporter), store)
    else:
        run_ops(membership.leave_ops(KEYS, world, name), store)
    if silent is not None and silent_leaves:  # a second leave at once: its proposal loses
        run_ops(membership.leave_ops(KEYS, world, world.participants[silent].node), store)
    dead = {name} | ({world.participants[silent].node} if silent is not None else set())
    live = [p.node for p in world.participants if p.node not in dead]
    now = 0.0
    states: dict[str, JoinState] = {}
    effects: dict[str, object] = {}
    for node in live:
        event = JoinRequested(
            run_id="run",
            node=node,
            now=now,
            from_round=0,
            reason="rejoin",
            held=world if held else None,
        )
        step = join.step(JoinState(), event, CONFIG)
        states[node], effects[node] = step.state, step.effects[-1]
    requests = dict.fromkeys(live, 1)
    reads: dict[str, list[str]] = {node: [] for node in live}
    completed: dict[str, RoundResult] = {}
    confirmed: set[str] = set()
    ok_order = True
    picks = iter(order)
    while len(completed) < len(live):
        assert now < 200.0, f"no progress by t={now}: {states}"
        ready = [
            node
            for node in live
            if node not in completed
            and (
                isinstance(effects[node], StoreOps)
                or all(k in store for k in effects[node].keys)  # type: ignore[attr-defined]
                or now >= effects[node].deadline  # type: ignore[attr-defined]
            )
        ]
        if not ready:
            now += 0.25  # time passes: the living beat, the dead do not
            for node in live:
                run_ops((membership.heartbeat_ops(KEYS, node, CONFIG)), store)
            continue
        node = ready[next(picks, 0) % len(ready)]
        effect, state = effects[node], states[node]
        if isinstance(effect, StoreOps):
            had = set(store)
            replies = run_ops(effect.ops, store)
            event: object = OpsDone(replies=replies, now=now)
            for op, reply in zip(effect.ops, replies, strict=True):
                if isinstance(op, Get) and isinstance(reply, bytes):
                    reads[node].append(op.key)
            if state.phase is JoinPhase.CONFIRMING:
                confirmed.add(node)
            result_key = KEYS.result(1)
            if result_key in store and result_key not in had:
                first = decode_result(store[result_key])
                if not first.void and not {p.node for p in first.participants} <= confirmed:
                    ok_order = False
        else:
            assert isinstance(effect, StoreWait)
            event = WaitEnded(present=all(k in store for k in effect.keys), now=now)
        step = join.step(state, event, CONFIG)
        assert not any(isinstance(e, Rejected) for e in step.effects), (state.phase, event)
        states[node] = step.state
        for out in step.effects:
            if isinstance(out, JoinSucceeded):
                completed[node] = out.result
        if step.state.phase in join.TERMINAL:
            assert step.state.phase is JoinPhase.COMPLETE, step.state.failure
        else:
            effects[node] = step.effects[-1]
            requests[node] += 1
    results = {r: decode_result(store[KEYS.result(r)]) for r in range(3) if KEYS.result(r) in store}
    return Run(results, completed, requests, ok_order, reads, now)


def _scenario(silent: bool) -> st.SearchStrategy[tuple[int, int, bool, int | None, list[int]]]:
    return st.integers(3 if silent else 2, 12).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.integers(0, n - 1),
            st.booleans(),
            st.integers(0, n - 1) if silent else st.none(),
            st.lists(st.integers(0, 1000), max_size=400),
        ).filter(lambda s: s[1] != s[3])
    )


def _check_ranks(run: Run) -> None:
    for result in run.results.values():
        ranks = [result.rank_of(p.node) for p in result.participants]
        assert ranks == list(range(result.world_size))


@settings(max_examples=60, deadline=None)
@given(_scenario(silent=False))
def test_R21_survivors_confirm_the_proposal_and_keep_their_ranks(
    scenario: tuple[int, int, bool, int | None, list[int]],
) -> None:
    n, gone, crash, _, order = scenario
    held = bool(order) and order[0] % 2 == 0
    run = _run(n, gone, crash, None, order, held)
    world = _world(n)
    survivors = [p.node for r, p in enumerate(world.participants) if r != gone]
    reformed = run.results[1]
    assert not reformed.void
    assert {p.node for p in reformed.participants} == set(survivors)
    # Sticky: a survivor whose rank is below the new size keeps it.
    for rank, p in enumerate(world.participants):
        if rank != gone and rank < reformed.world_size:
            assert reformed.rank_of(p.node) == rank
    # One world at a time: the round is published only once every survivor it names confirmed.
    assert run.confirmed_before_publish
    # O(1) store requests per survivor: check, confirm, wait, read (the last one: check,
    # confirm, publish, announce), but for one: the first to confirm watches the others as a
    # closer (its O(N) gathers and the result read).
    heavy = [node for node, count in run.requests.items() if count > 4]
    heavy += [node for node, keys in run.reads.items() if KEYS.result(1) in keys]
    assert len(set(heavy)) <= 1, run.requests
    assert set(run.completed) == set(survivors)
    assert all(result == reformed for result in run.completed.values())
    # No survivor reads an O(N) record: not the new result (it rebuilds it from the proposal
    # and the few-byte formed record), nor the old one when it holds it.
    for keys_read in run.reads.values():
        assert not held or KEYS.result(0) not in keys_read
    _check_ranks(run)


@settings(max_examples=40, deadline=None)
@given(_scenario(silent=True))
def test_R22_a_stalled_proposal_ends_void_and_the_next_round_forms_without_the_lost(
    scenario: tuple[int, int, bool, int | None, list[int]],
) -> None:
    n, gone, crash, silent, order = scenario
    assert silent is not None
    leaves = bool(order) and order[0] % 2 == 1
    run = _run(n, gone, crash, silent, order, silent_leaves=leaves)
    if leaves:
        # Its gone mark gives the proposal up at once: no heartbeat timeout, no takeover wait.
        assert run.ended < CONFIG.heartbeat_timeout, run.ended
    world = _world(n)
    assert run.results[1].void  # nobody trains in it: no JoinSucceeded names it
    assert all(result.round_no == 2 for result in run.completed.values())
    final = run.results[2]
    expected = {p.node for r, p in enumerate(world.participants) if r not in (gone, silent)}
    assert {p.node for p in final.participants} == expected
    assert all(result == final for result in run.completed.values())
    _check_ranks(run)


@given(raw=st.binary(max_size=200))
def test_a_proposal_of_foreign_bytes_is_refused_cleanly(raw: bytes) -> None:
    record = ProposalRecord(base_round=3, gone=(1, 4), proposer="n2", attempt=2)
    assert decode_proposal(encode_proposal(record)) == record
    try:
        decoded = decode_proposal(raw)
    except StateCorrupt:
        return
    assert isinstance(decoded, ProposalRecord)
