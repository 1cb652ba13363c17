"""Table-wide properties of the worker, worker_group and agent machines.

h2's idea: feed any event in any (reachable or constructed) state; the answer is a valid state, or
exactly the unchanged state plus one clean ``Rejected``; never an exception. And the tables keep
their own rules: at most one guarded row matches, and the exported Markdown pairs each row with the
markup ``transitions`` produced for it.
"""

from __future__ import annotations

from typing import Any

import pytest
from attrs import evolve
from hypothesis import given
from hypothesis import strategies as st
from strategies_core import (
    agent_configs,
    agent_events,
    agent_states,
    any_group,
    any_worker,
    group_events,
    worker_events,
)

from tpelastic.core import agent as ag
from tpelastic.core import worker as w
from tpelastic.core import worker_group as wg
from tpelastic.core.export import table_markdown
from tpelastic.core.machines import all_tables
from tpelastic.core.table import Step, Table
from tpelastic.core.values import Rejected

MINE = (w.TABLE, wg.TABLE, ag.TABLE)


def check_total(table: Table, state: Any, event: object, config: object) -> None:
    result: Step[Any] = table.step(state, event, config)
    assert isinstance(result.state.phase, table.phases)
    assert type(result.state) is type(state)
    rejections = [e for e in result.effects if isinstance(e, Rejected)]
    if rejections:
        assert result.effects == tuple(rejections) and len(rejections) == 1, result.effects
        assert result.state == state, "a rejected event must leave the state unchanged"
        assert rejections[0].event == type(event).__name__
    else:
        assert table.select(state, event, config) is not None


@given(state=any_worker, event=worker_events)
def test_worker_any_event_any_state(state: w.Worker, event: w.WorkerEventT) -> None:
    check_total(w.TABLE, state, event, None)


@given(data=st.data(), state=any_group)
def test_worker_group_any_event_any_state(data: st.DataObject, state: wg.WorkerGroup) -> None:
    event = data.draw(group_events(state.local_world_size))
    check_total(wg.TABLE, state, event, None)


@given(state=agent_states, event=agent_events, config=agent_configs())
def test_agent_any_event_any_state(
    state: ag.AgentState, event: ag.AgentEventT, config: ag.AgentConfig
) -> None:
    check_total(ag.TABLE, state, event, config)


def _matching_guards(table: Table, state: Any, event: object, config: object) -> list[str]:
    rows = table.rows_for(state.phase, type(event))
    return [r.guard for r in rows if r.guard and table.guards[r.guard](state, event, config)]


def _with_phase(state: Any, phase: Any) -> Any:
    return evolve(state, phase=phase)


@pytest.mark.parametrize("name", ["worker", "worker_group", "agent"])
@given(data=st.data())
def test_at_most_one_guarded_row_matches(name: str, data: st.DataObject) -> None:
    if name == "worker":
        state = data.draw(any_worker)
        state = _with_phase(state, data.draw(st.sampled_from(list(w.WorkerState))))
        event, config, table = data.draw(worker_events), None, w.TABLE
    elif name == "worker_group":
        state = data.draw(any_group)  # its phase is bound to its workers: no free choice
        event, config, table = data.draw(group_events(state.local_world_size)), None, wg.TABLE
    else:
        state, event = data.draw(agent_states), data.draw(agent_events)
        config, table = data.draw(agent_configs()), ag.TABLE
    assert len(_matching_guards(table, state, event, config)) <= 1


@pytest.mark.parametrize("table", all_tables(), ids=lambda t: t.name)
def test_exported_rows_are_the_table_rows(table: Table) -> None:
    """The generated Markdown shows every row, in order, with its own guard, action and target."""
    lines = [line for line in table_markdown(table).splitlines() if line.startswith("| ")]
    exported = [[cell.strip().strip("`") for cell in line.split("|")[2:7]] for line in lines[1:]]
    expected = [
        [r.src.name, r.on.__name__, r.guard or "—", r.action or "—", r.dst.name] for r in table.rows
    ]
    assert exported == expected


@pytest.mark.parametrize("table", MINE, ids=lambda t: t.name)
def test_every_guard_has_a_docstring(table: Table) -> None:
    for name, guard in table.guards.items():
        assert guard.__doc__, f"{table.name}: guard {name} needs its one line of prose"
