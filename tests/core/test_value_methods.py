"""``value_repr``, ``value_eq``, ``value_hash``: attrs' methods, without attrs compiling them.

The value classes on the launch path use them to save attrs' per-class compile (issue 5); these
tests hold them to attrs' own, on the real classes and on the cases attrs treats specially (a
field left out of the repr or of equality, a field with its own repr or ``eq_key``, a class made
in a function, another class with the same fields).
"""

from __future__ import annotations

import functools
import importlib

import attrs
import pytest
from attrs import field, frozen

from tpelastic.core.agent.states import AgentConfig, AgentState
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.liveness import LivenessTracker
from tpelastic.core.rendezvous.membership import RoundWatch
from tpelastic.core.rendezvous.ops import Get, JoinSucceeded, OpsDone, SetLeased
from tpelastic.core.rendezvous.records import ClosedRecord, NodeInfo, RoundResult
from tpelastic.core.rendezvous.replies import ResultRead, StatusRead
from tpelastic.core.rendezvous.state import JoinPhase, JoinRequested, JoinState
from tpelastic.core.values import Emit, Rejected, value_eq, value_hash, value_repr

# Modules whose every attrs class takes ``value_repr`` (the launch path's, in this area).
MODULES = (
    "tpelastic.core.values",
    "tpelastic.core.table",
    "tpelastic.core.worker",
    "tpelastic.core.worker_values",
    "tpelastic.core.worker_group",
    "tpelastic.core.group_values",
    "tpelastic.core.agent.events",
    "tpelastic.core.agent.states",
    "tpelastic.adapters.workers.signals",
    "tpelastic.adapters.workers.api",
    "tpelastic.adapters.workers.logs",
    "tpelastic.adapters.agent.spec",
    "tpelastic.adapters.agent.env",
    "tpelastic.adapters.launcher.config",
    "tpelastic.adapters.rendezvous.hosting",
    "tpelastic.adapters.rendezvous.info",
    "tpelastic.adapters.rendezvous.settings",
    "tpelastic.adapters.rendezvous.dynamic",
    "tpelastic.adapters.agent.membership",
    # The rendezvous core (join, ranks and resuming hold no classes): imported before a worker.
    "tpelastic.core.rendezvous.config",
    "tpelastic.core.rendezvous.keys",
    "tpelastic.core.rendezvous.liveness",
    "tpelastic.core.rendezvous.membership",
    "tpelastic.core.rendezvous.ops",
    "tpelastic.core.rendezvous.replies",
    "tpelastic.core.rendezvous.records",
    "tpelastic.core.rendezvous.state",
)


@functools.cache
def _twin_class(cls: type) -> type:
    fields = {
        a.name: attrs.field(repr=a.repr, eq=a.eq_key or a.eq, hash=a.hash)
        for a in attrs.fields(cls)
    }
    return attrs.make_class(cls.__name__, fields, frozen=True)


def attrs_twin(value: object) -> object:
    """``value`` as an instance of a twin class with attrs' generated methods."""
    cls = type(value)
    return _twin_class(cls)(*(getattr(value, a.name) for a in attrs.fields(cls)))


def attrs_own_repr(value: object) -> str:
    """What attrs' generated repr prints for ``value``."""
    return repr(attrs_twin(value))


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
    # Identity equality stays where a class asked for it (WorkerSpec: eq=False).
    compared = [c for c in classes if c.__eq__ is not object.__eq__]
    assert [c.__name__ for c in compared if c.__dict__.get("__eq__") is not value_eq] == []
    assert [c.__name__ for c in compared if c.__dict__.get("__hash__") is not value_hash] == []


def test_eq_and_hash_agree_with_attrs():
    @frozen(kw_only=True)
    class Local:
        __repr__ = value_repr
        __eq__ = value_eq
        __hash__ = value_hash

        a: int
        ignored: str = field(default="", eq=False)
        folded: str = field(default="x", eq=str.lower)

    @frozen(kw_only=True)
    class Other:
        a: int
        ignored: str = ""
        folded: str = "x"

    pairs = [
        (Local(a=1), Local(a=1)),
        (Local(a=1, ignored="p"), Local(a=1, ignored="q")),  # left out of equality
        (Local(a=1, folded="X"), Local(a=1, folded="x")),  # compared through eq_key
        (Local(a=1), Local(a=2)),
        (Local(a=1, folded="X"), Local(a=1, folded="y")),
        (AgentState(), AgentState(round=3)),
        (AgentState(round=3), AgentState(round=3)),
    ]
    for left, right in pairs:
        assert (left == right) == (attrs_twin(left) == attrs_twin(right))
        assert (left != right) == (attrs_twin(left) != attrs_twin(right))
        if left == right:
            assert hash(left) == hash(right)
    assert Local(a=1) != Other(a=1) and value_eq(Local(a=1), Other(a=1)) is NotImplemented
    assert len({AgentState(), AgentState(), AgentState(round=1)}) == 2
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        Local(a=1).a = 2  # type: ignore[misc]


def _rendezvous_pairs() -> list[tuple[object, object]]:
    """Pairs of rendezvous values, equal and not, including the fields attrs treats specially."""
    node = NodeInfo(node="a", addr="h:1", prev_round=0, prev_rank=0)
    result = RoundResult(round_no=2, participants=(node, NodeInfo(node="b")), closer="a")
    tracker = LivenessTracker().observe("a", 3, 1.0)
    state = JoinState(
        phase=JoinPhase.GATHERING, keys=RunKeys("r"), node=node, round_no=2, previous=result
    )
    return [
        (node, NodeInfo(node="a", addr="h:1", prev_round=0, prev_rank=0)),
        (node, NodeInfo(node="a", addr="h:2", prev_round=0, prev_rank=0)),
        # ``_ranks`` (eq=False, hash=False, repr=False) is built from ``participants``.
        (result, RoundResult(round_no=2, participants=result.participants, closer="a")),
        (result, RoundResult(round_no=2, participants=result.participants, closer="b")),
        (ClosedRecord(outcome="done"), ClosedRecord(outcome="done", reason="x")),
        (RunKeys("r"), RunKeys("r")),
        (Get("k"), Get("k")),
        (Get("k"), Get("j")),
        (SetLeased("k", b"1", 2.0), SetLeased("k", b"1", 2.0)),
        (OpsDone(replies=(b"x", 3, None), now=1.5), OpsDone(replies=(b"x", 3, None), now=1.5)),
        (JoinSucceeded(result=result, rank=0), JoinSucceeded(result=result, rank=1)),
        (
            RoundWatch(closed=None, next_opened="n", waiting=1),
            RoundWatch(closed=None, next_opened="n", waiting=1),
        ),
        (RendezvousConfig(min_nodes=1, max_nodes=2), RendezvousConfig(min_nodes=1, max_nodes=2)),
        (RendezvousConfig(min_nodes=1, max_nodes=2), RendezvousConfig(min_nodes=1, max_nodes=3)),
        (
            JoinRequested(run_id="r", node="a", now=0.0),
            JoinRequested(run_id="r", node="a", now=0.0),
        ),
        (StatusRead(now=1.0, arrivals=2), StatusRead(now=1.0, arrivals=2)),
        (ResultRead(now=1.0, result=result), ResultRead(now=1.0, result=result, won=True)),
        (tracker, LivenessTracker().observe("a", 3, 1.0)),
        (tracker, LivenessTracker().observe("a", 3, 2.0)),
        (
            state,
            JoinState(
                phase=JoinPhase.GATHERING, keys=RunKeys("r"), node=node, round_no=2, previous=result
            ),
        ),
        (
            state,
            JoinState(
                phase=JoinPhase.GATHERING,
                keys=RunKeys("r"),
                node=node,
                round_no=2,
                previous=result,
                liveness=tracker,
            ),
        ),
        (
            state,
            JoinState(
                phase=JoinPhase.COLLECTING,
                keys=RunKeys("r"),
                node=node,
                round_no=2,
                previous=result,
            ),
        ),
    ]


def _hash_or_error(value: object) -> object:
    try:
        return hash(value)
    except TypeError as error:
        return type(error)


@pytest.mark.parametrize("pair", _rendezvous_pairs(), ids=lambda p: type(p[0]).__name__)
def test_rendezvous_values_keep_attrs_repr_eq_and_hash(pair):
    left, right = pair
    for value in pair:
        assert repr(value) == attrs_own_repr(value)
    assert (left == right) == (attrs_twin(left) == attrs_twin(right))
    assert (left != right) == (attrs_twin(left) != attrs_twin(right))
    # Hashable exactly where attrs' hash is: a LivenessTracker (a dict inside) and so a
    # JoinState were unhashable before and stay so; equal hashable values hash alike.
    assert type(_hash_or_error(left)) is type(_hash_or_error(attrs_twin(left)))
    if left == right and not isinstance(_hash_or_error(left), type):
        assert hash(left) == hash(right)


def test_join_state_compares_its_liveness_tracker_and_is_unhashable():
    moved = JoinState(liveness=LivenessTracker().observe("a", 1, 0.0))
    assert JoinState() == JoinState() and JoinState() != moved
    assert moved == JoinState(liveness=LivenessTracker().observe("a", 1, 0.0))
    with pytest.raises(TypeError, match="unhashable"):
        hash(JoinState())
    assert hash(RoundResult(round_no=1)) == hash(RoundResult(round_no=1))


def _adapter_pairs() -> list[tuple[object, object]]:
    """Pairs of the rendezvous adapters' values (a subclass, a converter, positional fields)."""
    from tpelastic.adapters.agent.membership import Look
    from tpelastic.adapters.rendezvous.dynamic import DynamicRendezvousInfo
    from tpelastic.adapters.rendezvous.info import RendezvousInfo, RendezvousStoreInfo
    from tpelastic.adapters.rendezvous.settings import RendezvousSettings

    where = RendezvousStoreInfo("h", 29500)
    store = object()
    config = RendezvousConfig(min_nodes=1, max_nodes=2)
    return [
        (where, RendezvousStoreInfo("h", 29500)),
        (where, RendezvousStoreInfo("h", 29501)),
        (RendezvousInfo(store, 0, 1, where, ["a"]), RendezvousInfo(store, 0, 1, where, ("a",))),
        (RendezvousInfo(store, 0, 1, where), RendezvousInfo(object(), 0, 1, where)),
        (
            DynamicRendezvousInfo(store, 0, 1, where, round=2),
            DynamicRendezvousInfo(store, 0, 1, where, round=2),
        ),
        (
            DynamicRendezvousInfo(store, 0, 1, where, round=2),
            DynamicRendezvousInfo(store, 0, 1, where, round=2, attempt=1),
        ),
        (
            RendezvousSettings.from_config("r", config),
            RendezvousSettings.from_config("r", config),
        ),
        (Look(), Look(waiting=1)),
        (Look(closed=("failed", "x")), Look(closed=("failed", "x"))),
    ]


@pytest.mark.parametrize("pair", _adapter_pairs(), ids=lambda p: type(p[0]).__name__)
def test_rendezvous_adapter_values_keep_attrs_repr_eq_and_hash(pair):
    test_rendezvous_values_keep_attrs_repr_eq_and_hash(pair)


def test_a_subclass_is_never_equal_to_its_base():
    from tpelastic.adapters.rendezvous.dynamic import DynamicRendezvousInfo
    from tpelastic.adapters.rendezvous.info import RendezvousInfo

    store = object()
    assert RendezvousInfo(store, 0, 1) != DynamicRendezvousInfo(store, 0, 1)
    assert DynamicRendezvousInfo(store, 0, 1) == DynamicRendezvousInfo(store, 0, 1)
