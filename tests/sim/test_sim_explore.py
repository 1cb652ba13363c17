"""The exhaustive explorer: every node steps the product's core (node_step and the join machine);
every interleaving of a small configuration with each fault keeps R1-R7, R16, R17 and S6, its
fault-free continuations end the run (S5), and deliberately broken tables are caught with
shortest, replayable counterexamples."""

from __future__ import annotations

import functools

import pytest
from attrs import evolve

from tpelastic.core import agent as ag
from tpelastic.core import membership as mb
from tpelastic.core.agent import table as agent_table
from tpelastic.core.agent.states import AgentConfig, AgentState
from tpelastic.core.node import NodeConfig, NodeState, NodeStep, node_step
from tpelastic.core.rendezvous import join, reading
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.replies import StatusRead
from tpelastic.core.rendezvous.state import JoinState
from tpelastic.core.sim.explore import (
    FAULT_BOUNDS,
    Bounds,
    Violation,
    explore,
    formed_prefix,
    replay,
)
from tpelastic.core.sim.explore_events import apply, enabled
from tpelastic.core.sim.explore_liveness import (
    calm,
    continue_fairly,
    explore_liveness,
    replay_stall,
)
from tpelastic.core.sim.explore_model import (
    CoreFn,
    Label,
    Phase,
    StoreState,
    World,
    check_invariants,
)
from tpelastic.core.table import Row, build_table


def closes_without_waiting_for_members(
    state: JoinState, event: StatusRead, config: RendezvousConfig
) -> bool:
    """Test-only broken guard: close once min_nodes arrived, ignoring pending members of the
    previous round (and the last call). One world at a time (R7) must then break."""
    if join.GUARDS["may_close"](state, event, config):
        return True
    other = ("join_window_over", "proposal_stalled")
    if any(join.GUARDS[name](state, event, config) for name in other):
        return False
    return event.arrivals >= config.min_nodes


BROKEN = build_table(
    name="rendezvous_join_broken",
    phases=join.TABLE.phases,
    initial=join.TABLE.initial,
    events=join.TABLE.events,
    rows=join.ROWS,
    guards={**join.GUARDS, "may_close": closes_without_waiting_for_members},
    actions=join.ACTIONS,
    terminal=join.TABLE.terminal,
)

BROKEN_STEP = functools.partial(join.step, table=BROKEN)

FORMING = Bounds(nodes=3, min_nodes=2, max_nodes=3, ticks=0, crashes=0, failures=0)


def test_every_interleaving_of_forming_the_first_round_keeps_the_invariants() -> None:
    found = explore(FORMING)
    assert found.counterexample is None, found.counterexample
    assert found.complete and found.rounds_reached == 0
    assert found.states > 500  # the search really branched


@pytest.mark.parametrize("fault", sorted(FAULT_BOUNDS))
def test_S5_every_explored_state_of_three_nodes_ends_once_faults_stop(fault: str) -> None:
    """Every interleaving of 3 nodes with the fault keeps the safety invariants, and from every
    state the run can end: a success, a failure with the budget spent, or (the store gone)
    every survivor's clean exit; never a give-up with budget left (S6), never a hang."""
    bounds = FAULT_BOUNDS[fault]
    found = explore_liveness(bounds, prefix=formed_prefix(bounds))
    assert found.stall is None, found.stall
    assert found.complete and found.states > 100


def test_the_store_hosts_death_ends_every_survivor_cleanly() -> None:
    bounds = FAULT_BOUNDS["death of the store host"]
    world = replay(bounds, (*formed_prefix(bounds), ("host_death", "n0")))
    assert world.store_state is StoreState.GONE
    events: list[tuple[str, str]] = []
    assert continue_fairly(world, bounds, join.step, node_step, 30, set(), events) is None
    world = replay(calm(bounds), tuple(events), start=world)
    assert [n.phase for n in world.nodes] == [Phase.DOWN, Phase.ENDED, Phase.ENDED]
    assert all(n.agent.exit_code == ag.EXIT_RENDEZVOUS_FAILED for n in world.nodes[1:])
    assert all("tpelastic store" in n.lost for n in world.nodes[1:])
    assert world.now <= bounds.heartbeat_timeout + 4  # the expiry, then the looks that fail


def test_a_broken_join_guard_is_found_with_a_minimal_replayable_counterexample() -> None:
    bounds = Bounds(nodes=2, min_nodes=1, max_nodes=2, ticks=0, crashes=0, failures=1)
    assert explore(bounds).counterexample is None  # the real table is fine here
    found = explore(bounds, step=BROKEN_STEP)
    example = found.counterexample
    assert example is not None
    assert example.invariant == "R7", example
    assert "rounds [0, 1] train side by side" in example.message
    events = example.events
    # The shortest story: n0 forms round 0 alone; n1 arrives late, waits in round 1 and, with
    # the broken guard, closes it at once without waiting for n0 to come over.
    assert events[0] == ("start", "n0") and ("start", "n1") in events
    assert len(events) == found.deepest  # breadth first: nothing shorter breaks an invariant
    with pytest.raises(Violation, match="R7"):
        replay(bounds, events, step=BROKEN_STEP)
    replay(bounds, events[:-1], step=BROKEN_STEP)  # one event shorter: no violation yet
    with pytest.raises(ValueError, match="not enabled"):
        replay(bounds, events[1:], step=BROKEN_STEP)


def test_a_closer_that_drops_the_attempts_is_caught_by_R16(monkeypatch: pytest.MonkeyPatch) -> None:
    # Test-only bug: the closer forgets the in-place attempts its members report.
    monkeypatch.setattr(
        reading, "round_restart_count", lambda prev, attempts, failed: prev + int(failed)
    )
    bounds = Bounds(ticks=6, failures=1, leaves=1, crashes=0, restart_in_place=True)
    # n0's workers fail and it restarts in place; the others follow on their next look. Time
    # passes beyond the collateral window, so a leave then does not refund the attempt (A14).
    restarted = (("fail", "n0"), ("look", "n1"), ("look", "n2"), *[("tick", "")] * 5)
    found = explore(bounds, prefix=formed_prefix(bounds) + restarted)
    example = found.counterexample
    assert example is not None and example.invariant == "R16", example
    assert any(e[0] == "fail" for e in example.events)
    assert any(e[0] == "leave" for e in example.events)


# --- broken agent tables: the explorer steps the agent's decisions, so it finds their bugs ----


def _agent_table(*rows: Row, **actions: object) -> object:
    """The agent table with ``rows`` in place of those for the same (source, event)."""
    replaced = {(r.src, r.on) for r in rows}
    kept = tuple(r for r in agent_table.ROWS if (r.src, r.on) not in replaced)
    used = {r.action for r in (*kept, *rows)} | {r.guard for r in (*kept, *rows)}
    return build_table(
        name="agent_broken",
        phases=ag.AgentPhase,
        initial=ag.AgentPhase.INIT,
        events=ag.AGENT_EVENTS,
        rows=(*kept, *rows),
        guards={k: v for k, v in agent_table.GUARDS.items() if k in used},
        actions={
            k: v  # type: ignore[misc]
            for k, v in {**agent_table.ACTIONS, **actions}.items()
            if k in used
        },
        terminal=frozenset({ag.AgentPhase.SUCCEEDED, ag.AgentPhase.FAILED}),
    )


def fail_on_lapse(
    state: AgentState, event: ag.KeepAliveLapsed, config: AgentConfig
) -> tuple[AgentState, tuple[object, ...]]:
    """Test-only broken action: a lapsed keep-alive fails the node (fencing as failing)."""
    reason = f"keep-alive lost: {event.reason}"
    done = evolve(state, exit_code=ag.EXIT_RENDEZVOUS_FAILED, last_failure=reason)
    stop = ag.StopWorkers(reason=reason)
    return done, (stop, ag.ReportFailure(reason=reason, exit_code=ag.EXIT_RENDEZVOUS_FAILED))


FENCING_FAILS = _agent_table(
    Row(
        src=ag.AgentPhase.RUNNING,
        on=ag.KeepAliveLapsed,
        dst=ag.AgentPhase.FAILED,
        action="fail_on_lapse",
    ),
    fail_on_lapse=fail_on_lapse,
)
# A member that ignores the next round's opening: it never re-joins, so the round waits for it.
IGNORES_THE_NEXT_ROUND = _agent_table(
    Row(src=ag.AgentPhase.RUNNING, on=ag.NextRoundOpened, dst=ag.AgentPhase.RUNNING)
)


def _use_agent_table(monkeypatch: pytest.MonkeyPatch, table: object) -> None:
    # node_step composes the agent package's table; the test swaps it for a broken one.
    monkeypatch.setattr(ag, "step", table.step)  # type: ignore[attr-defined]


def test_S6_an_agent_that_fails_when_fenced_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    bounds = FAULT_BOUNDS["pause of a node"]
    prefix = formed_prefix(bounds)
    assert explore(bounds, prefix=prefix).counterexample is None
    _use_agent_table(monkeypatch, FENCING_FAILS)
    found = explore(bounds, prefix=prefix)
    example = found.counterexample
    assert example is not None and example.invariant == "S6", example
    assert "keep-alive lost" in example.message and "0 of 1 restarts used" in example.message
    # The shortest story: a node is paused for one heartbeat interval and resumes.
    assert example.events[len(prefix) :] == (("pause", "n0"), ("tick", ""), ("resume", "n0"))
    with pytest.raises(Violation, match="S6"):
        replay(bounds, example.events)
    replay(bounds, example.events[:-1])


def test_S5_a_member_that_never_rejoins_is_reported_as_a_hang(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bounds = FAULT_BOUNDS["graceful leave"]
    prefix = formed_prefix(bounds)
    _use_agent_table(monkeypatch, IGNORES_THE_NEXT_ROUND)
    assert explore(bounds, prefix=prefix).counterexample is None  # safe, but not live
    found = explore_liveness(bounds, prefix=prefix, rotations=30)
    stall = found.stall
    assert stall is not None and stall.invariant == "S5", stall
    assert ("leave", "n0") in stall.events or ("leave", "n1") in stall.events
    assert "training@r0/3" in stall.detail  # the survivors train on in a world that ended
    end = replay_stall(bounds, stall)
    assert any(n.phase is Phase.UP for n in end.nodes)  # the replay ends where it hung


# The explorer's schedule of the network-fault property's split brain: n1 is cut off from the
# store (which serves n0 and n2) as its workers fail; its in-place open waits in the handler.
_SCHEDULED = frozenset({"start", "deliver", "wake", "expire", "lost", "send", "timer", "barrier"})
CUT_AND_FAIL = Bounds(ticks=12, cuts=1, failures=1, crashes=0, restart_in_place=True)


def _run(world: World, bounds: Bounds, core: CoreFn, labels: list[Label]) -> World:
    for label in labels:
        world = apply(world, label, bounds, join.step, core)
        check_invariants(world, bounds.config())
    return world


def _one_tick(world: World, bounds: Bounds, core: CoreFn) -> World:
    """Every pending step, one look per member, every step again, then time moves."""
    for looks in (False, True, False):
        for _ in range(200):
            kinds = {"look"} if looks else _SCHEDULED
            moves = [e for e in enabled(world, bounds) if e[0] in kinds]
            if not moves:
                break
            world = _run(world, bounds, core, moves[:1] if not looks else moves)
            if looks:
                break
    return _run(world, bounds, core, [("tick", "")])


def _cut_while_opening(core: CoreFn) -> World:
    bounds = CUT_AND_FAIL
    world = replay(bounds, formed_prefix(bounds))
    world = _run(world, bounds, core, [("cut", "n1"), ("fail", "n1")])
    assert world.nodes[1].outbox is not None  # the open waits for the store
    for _ in range(10):  # the peers find n1 dead and form round 1 without it
        world = _one_tick(world, bounds, core)
        if all(n.training and n.agent.round == 1 for n in (world.nodes[0], world.nodes[2])):
            break
    else:
        raise AssertionError("round 1 never formed without the cut-off node")
    world = _run(world, bounds, core, [("reconnect", "n1"), ("send", "n1")])
    return world


def _trusting_core(state: NodeState, observation: object, config: NodeConfig) -> NodeStep:
    """Test-only broken core: an open's landing starts the attempt whatever the keep-alive
    (the start decided when the failure asked for it)."""
    if isinstance(observation, mb.OpenLanded):
        observation = evolve(observation, last_beat=observation.now)
    return node_step(state, observation, config)


def test_R7_an_open_that_waited_out_a_cut_never_trains_beside_the_next_round() -> None:
    world = _cut_while_opening(node_step)
    cut = world.nodes[1]
    assert cut.agent.phase is ag.AgentPhase.FENCED and not cut.training
    with pytest.raises(Violation, match="R7: rounds \\[0, 1\\] train side by side"):
        _cut_while_opening(_trusting_core)
