"""``value_repr``: the repr attrs would generate, without attrs compiling one per class.

The value classes on the launch path use it to save attrs' per-class compile (issue 5); these
tests hold its output to attrs' own, field for field, on the real classes and on the cases attrs
treats specially (a field left out of the repr, a field with its own repr, a class made in a
function).
"""

from __future__ import annotations

import importlib

import attrs
import pytest
from attrs import field, frozen

from tpelastic.core.agent.states import AgentConfig, AgentState
from tpelastic.core.values import Emit, Rejected, value_repr

# Modules whose every attrs class takes ``value_repr`` (the launch path's, in this area).
MODULES = (
    "tpelastic.core.values",
    "tpelastic.core.table",
    "tpelastic.core.worker",
    "tpelastic.core.worker_group",
    "tpelastic.core.restart_budget",
    "tpelastic.core.agent.events",
    "tpelastic.core.agent.states",
    "tpelastic.adapters.workers.signals",
    "tpelastic.adapters.workers.api",
    "tpelastic.adapters.workers.logs",
    "tpelastic.adapters.agent.spec",
    "tpelastic.adapters.agent.env",
    "tpelastic.adapters.launcher.config",
    "tpelastic.adapters.rendezvous.hosting",
    "tpelastic.adapters.rendezvous.parameters",
)


def attrs_own_repr(value: object) -> str:
    """What attrs' generated repr prints for ``value``: a twin class with attrs' repr."""
    cls = type(value)
    twin = attrs.make_class(
        cls.__name__,
        {a.name: attrs.field(repr=a.repr) for a in attrs.fields(cls)},
        frozen=True,
    )
    return repr(twin(*(getattr(value, a.name) for a in attrs.fields(cls))))


@pytest.mark.parametrize(
    "value",
    [
        AgentState(),
        AgentConfig(max_restarts=3, min_nodes=1, max_nodes=2, role="trainer"),
        Emit(name="round", fields=(("n", 1), ("why", "it's 'quoted'"))),
        Rejected(machine="agent", phase="INIT", event="X", reason=""),
    ],
    ids=lambda v: type(v).__name__,
)
def test_real_classes_print_as_attrs_would(value):
    assert repr(value) == attrs_own_repr(value)
    assert repr(value).startswith(type(value).__name__ + "(")


def test_left_out_and_own_repr_fields_and_a_class_made_in_a_function():
    @frozen(kw_only=True)
    class Local:
        __repr__ = value_repr

        shown: int
        hidden: str = field(default="secret", repr=False)
        custom: int = field(default=7, repr=lambda v: f"<{v}>")
        nested: tuple[AgentState, ...] = ()

    value = Local(shown=1, nested=(AgentState(),))
    assert repr(value) == f"Local(shown=1, custom=<7>, nested=({AgentState()!r},))"
    assert repr(value) == attrs_own_repr(value)
    assert "secret" not in repr(value)


def test_not_an_attrs_instance_fails_clearly():
    with pytest.raises(AttributeError):
        value_repr(object())


@pytest.mark.parametrize("name", MODULES)
def test_launch_path_value_classes_take_value_repr(name):
    # Regression guard for the launch cost: a new value class there should not compile a repr.
    module = importlib.import_module(name)
    classes = [
        v
        for v in vars(module).values()
        if isinstance(v, type) and attrs.has(v) and v.__module__ == name
    ]
    assert classes
    assert [c.__name__ for c in classes if c.__dict__.get("__repr__") is not value_repr] == []
