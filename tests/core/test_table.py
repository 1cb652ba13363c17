"""core/table.py: a table's own checks, its stepping rules, and its declaration to ``transitions``.

The tables are validated at import by plain checks in ``build_table``; ``transitions`` (the
declared engine) is built only by the spec export and here, so importing the machines stays cheap.
"""

from __future__ import annotations

import enum
import subprocess
import sys
from typing import Any

import attrs
import pytest
from attrs import evolve, frozen

from tpelastic.core.agent import AgentState
from tpelastic.core.export import markup, markup_machine
from tpelastic.core.machines import all_tables
from tpelastic.core.rendezvous.state import JoinState
from tpelastic.core.table import InvalidTransition, Row, Table, build_table, phase_setter
from tpelastic.core.values import Rejected


class Ph(enum.Enum):
    A = "a"
    B = "b"
    C = "c"
    DONE = "done"


@frozen(kw_only=True)
class Toy:
    phase: Ph = Ph.A
    count: int = 0


@frozen(kw_only=True)
class Poke:
    size: int


@frozen(kw_only=True)
class Stop:
    pass


def _big(state: Toy, event: Poke, config: Any) -> bool:
    """The poke is big."""
    return event.size > 10


def _huge(state: Toy, event: Poke, config: Any) -> bool:
    """The poke is huge (overlaps with big on purpose, for the bug test)."""
    return event.size > 100


def _count(state: Toy, event: object, config: Any) -> tuple[Toy, tuple[object, ...]]:
    return Toy(phase=state.phase, count=state.count + 1), ("counted",)


def toy_table(**overrides: Any) -> Table:
    spec: dict[str, Any] = {
        "name": "toy",
        "phases": Ph,
        "initial": Ph.A,
        "events": (Poke, Stop),
        "rows": (
            Row(src=Ph.A, on=Poke, dst=Ph.B, guard="big", action="count"),
            Row(src=Ph.A, on=Poke, dst=Ph.C, guard="huge"),
            Row(src=Ph.A, on=Poke, dst=Ph.A, action="count", note="small pokes stay"),
            Row(src=Ph.B, on=Poke, dst=Ph.C, guard="big"),
            Row(src=Ph.B, on=Stop, dst=Ph.DONE),
        ),
        "guards": {"big": _big, "huge": _huge},
        "actions": {"count": _count},
        "terminal": frozenset({Ph.DONE}),
    }
    spec.update(overrides)
    return build_table(**spec)


def test_a_guarded_row_wins_over_the_otherwise_row_and_the_action_runs() -> None:
    step = toy_table().step(Toy(), Poke(size=50), None)
    assert step.state == Toy(phase=Ph.B, count=1)
    assert step.effects == ("counted",)


def test_the_unguarded_row_is_the_otherwise_branch() -> None:
    step = toy_table().step(Toy(), Poke(size=1), None)
    assert step.state == Toy(phase=Ph.A, count=1)


def test_a_row_without_action_only_moves_the_phase() -> None:
    step = toy_table().step(Toy(phase=Ph.B), Stop(), None)
    assert step.state == Toy(phase=Ph.DONE) and step.effects == ()


@pytest.mark.parametrize(
    ("state", "event", "reason"),
    [
        (Toy(phase=Ph.B), Poke(size=1), "no guard holds"),
        (Toy(phase=Ph.DONE), Poke(size=1), "DONE is terminal"),
        (Toy(phase=Ph.C), Stop(), "Stop is not expected in C"),
    ],
)
def test_an_event_without_a_row_is_rejected_and_changes_nothing(
    state: Toy, event: object, reason: str
) -> None:
    step = toy_table().step(state, event, None)
    assert step.state is state
    assert step.effects == (
        Rejected(machine="toy", phase=state.phase.name, event=type(event).__name__, reason=reason),
    )


def test_two_guards_holding_at_once_is_a_bug_that_raises() -> None:
    with pytest.raises(InvalidTransition, match="guards big, huge all hold in A"):
        toy_table().step(Toy(), Poke(size=500), None)


def test_select_names_the_row_and_rows_for_lists_the_candidates() -> None:
    table = toy_table()
    assert table.select(Toy(), Poke(size=50), None) == table.rows[0]
    assert table.rows_for(Ph.A, Poke) == table.rows[:3]
    assert table.rows_for(Ph.C, Poke) == ()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"initial": "A"}, "initial phase 'A' is not a member of Ph"),
        ({"rows": (Row(src=Ph.A, on=int, dst=Ph.B),)}, "int is not one of the machine's events"),
        ({"rows": (Row(src=Ph.A, on=Stop, dst=Ph.B, guard="nope"),)}, "guard 'nope' is not"),
        ({"rows": (Row(src=Ph.A, on=Stop, dst=Ph.B, action="nope"),)}, "action 'nope' is not"),
        ({"rows": (Row(src=Ph.DONE, on=Stop, dst=Ph.A),)}, "DONE is terminal"),
        (
            {"rows": (Row(src=Ph.A, on=Stop, dst=Ph.B), Row(src=Ph.A, on=Stop, dst=Ph.C))},
            "A on Stop: 2 unguarded rows",
        ),
        (
            {
                "rows": (
                    Row(src=Ph.A, on=Poke, dst=Ph.B, guard="big"),
                    Row(src=Ph.A, on=Poke, dst=Ph.C, guard="big"),
                )
            },
            "a guard is used twice",
        ),
        ({"rows": (Row(src=Ph.A, on=Stop, dst=Ph.B),)}, "defined but never used"),
    ],
)
def test_build_table_rejects_an_inconsistent_table_naming_the_problem(
    override: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidTransition, match=message):
        toy_table(**override)


@pytest.mark.parametrize("table", all_tables(), ids=lambda t: t.name)
def test_transitions_accepts_every_table_and_its_markup_holds_every_row(table: Table) -> None:
    machine = markup_machine(table)
    assert set(machine.states) == {p.name for p in table.phases}
    marked = markup(table)
    assert marked["initial"] == table.initial.name
    declared = sorted(
        (m["source"], m["trigger"], m["dest"], tuple(m.get("conditions", [])))
        for m in marked["transitions"]
    )
    rows = sorted(
        (r.src.name, r.on.__name__, r.dst.name, (r.guard,) if r.guard else ()) for r in table.rows
    )
    assert declared == rows


def test_importing_and_stepping_the_machines_does_not_import_transitions() -> None:
    code = (
        "import sys\n"
        "from tpelastic.core.machines import all_tables\n"
        "all_tables()\n"
        "import tpelastic.core.sim.cluster\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'transitions'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"


@frozen(kw_only=True)
class Derived:
    """A state whose derived field depends on its phase: the setter must run its init."""

    phase: Ph = Ph.A
    label: str = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "label", f"in {self.phase.name}")


def test_phase_setter_copies_every_field_and_sets_the_phase() -> None:
    old = Toy(phase=Ph.A, count=7)
    new = phase_setter(Toy)(old, Ph.C)
    assert new == evolve(old, phase=Ph.C) and type(new) is Toy
    assert old == Toy(phase=Ph.A, count=7)


def test_phase_setter_falls_back_to_evolve_where_the_shortcut_would_be_wrong() -> None:
    assert phase_setter(Derived)(Derived(), Ph.B).label == "in B"


@pytest.mark.parametrize(
    "sample",
    [JoinState(reason="failure", from_round=3, round_no=4, slot=2), AgentState()],
    ids=lambda s: type(s).__name__,
)
def test_phase_setter_agrees_with_evolve_on_machine_states(sample: Any) -> None:
    """The setter the tables step with copies a machine's state exactly: only the phase moves
    (the other machines' states are stepped by tests/properties/test_tables_total.py)."""
    for phase in type(sample.phase):
        assert phase_setter(type(sample))(sample, phase) == evolve(sample, phase=phase)
