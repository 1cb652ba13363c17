"""core.copying.evolve gives what attrs.evolve gives: same values, same validation, same errors."""

from __future__ import annotations

import attrs
import pytest
from attrs import define, field, frozen
from hypothesis import given
from hypothesis import strategies as st

from tpelastic.core.agent.states import AgentState
from tpelastic.core.copying import copy_with_phase, evolve
from tpelastic.core.rendezvous.state import JoinPhase, JoinState
from tpelastic.core.table import phase_setter


def _positive(_instance: object, attribute: attrs.Attribute, value: int) -> None:  # type: ignore[type-arg]
    if value <= 0:
        raise ValueError(f"{attribute.name} must be positive")


def _below_limit(instance: Bounded, _attribute: object, value: int) -> None:
    if value > instance.limit:
        raise ValueError("count above limit")


@frozen
class Bounded:
    limit: int = field(validator=_positive)
    count: int = field(default=0, validator=_below_limit)
    _hidden: str = "h"


@frozen
class Converted:
    value: int = field(default=0, converter=int)


@define
class Mutable:
    value: int = 0


@given(
    round_no=st.integers(0, 10**6),
    slot=st.none() | st.integers(0, 10**4),
    reason=st.sampled_from(["first", "rejoin", "membership"]),
)
def test_a_join_state_evolves_as_attrs_evolves_it(
    round_no: int, slot: int | None, reason: str
) -> None:
    state = JoinState(round_no=7, reason="waiting")
    changes = {"round_no": round_no, "slot": slot, "reason": reason}
    assert evolve(state, **changes) == attrs.evolve(state, **changes)
    assert evolve(state, **changes) is not state


def test_every_validator_runs_on_the_new_values_as_init_would() -> None:
    value = Bounded(limit=5, count=3)
    with pytest.raises(ValueError, match="join reason"):
        evolve(JoinState(), reason="bogus")
    # A validator of an unchanged field that reads a changed one still runs (as in __init__).
    with pytest.raises(ValueError, match="count above limit"):
        evolve(value, limit=2)
    with pytest.raises(ValueError, match="limit must be positive"):
        evolve(value, limit=0)
    assert evolve(value, hidden="x") == attrs.evolve(value, hidden="x")


def test_a_change_that_names_no_field_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        evolve(JoinState(), nope=1)
    with pytest.raises(TypeError):
        attrs.evolve(JoinState(), nope=1)


def test_classes_it_cannot_copy_safely_get_attrs_evolve() -> None:
    assert evolve(Converted(1), value="7") == Converted(7)  # the converter ran
    assert evolve(Mutable(1), value=2) == Mutable(2)
    assert copy_with_phase(Converted) is None
    assert copy_with_phase(Mutable) is None


def test_the_tables_phase_setter_copies_every_field() -> None:
    state = JoinState(round_no=4, slot=2, reason="rejoin")
    moved = phase_setter(JoinState)(state, JoinPhase.LOCATING)
    assert moved == attrs.evolve(state, phase=JoinPhase.LOCATING)
    assert state.phase is JoinPhase.IDLE
    agent = AgentState()
    assert copy_with_phase(AgentState) is not None
    assert evolve(agent, restart_count=3) == attrs.evolve(agent, restart_count=3)
