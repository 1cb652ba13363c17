"""The agent carries out effects through one table keyed by effect type, checked when built.

The table must hold a handler for every effect type the core can return: the core declares its
own (``AGENT_EFFECTS``, checked here against the classes its events module defines), random runs
of the core return no other, and an agent whose table misses one is not built at all.
"""

from __future__ import annotations

import inspect

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpelastic.adapters.agent.effect_handlers import EFFECT_TYPES, check_covers
from tpelastic.adapters.agent.local import LocalElasticAgent
from tpelastic.adapters.agent.spec import WorkerSpec
from tpelastic.adapters.rendezvous.dynamic import DynamicRendezvousHandler
from tpelastic.adapters.stores.memory import MemoryStore
from tpelastic.core import agent as core
from tpelastic.core.agent import events
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.values import Emit, Rejected
from tpelastic.core.worker_group import WorkerFailure


def test_the_core_declares_every_effect_class_it_defines() -> None:
    defined = {
        cls
        for _, cls in inspect.getmembers(events, inspect.isclass)
        if cls.__module__ == events.__name__ and attrs.has(cls)
    }
    assert set(core.AGENT_EFFECTS) == defined - set(events.AGENT_EVENTS)
    assert {Emit, Rejected} <= set(EFFECT_TYPES)


def _now() -> st.SearchStrategy[float]:
    return st.floats(min_value=0.0, max_value=1e4)


def _failures(size: int) -> st.SearchStrategy[tuple[WorkerFailure, ...]]:
    one = st.builds(
        WorkerFailure,
        local_rank=st.integers(0, 1),
        global_rank=st.integers(0, size * 2 - 1),
        exitcode=st.sampled_from([1, -9, None]),
        signal=st.sampled_from([None, "SIGKILL"]),
        at=_now(),
    )
    return st.lists(one, min_size=1, max_size=2).map(tuple)


def _events() -> st.SearchStrategy[object]:
    return st.one_of(
        st.builds(core.AgentStarted, now=_now()),
        st.builds(
            core.RoundCompleted,
            now=_now(),
            round=st.integers(0, 4),
            group_rank=st.integers(0, 1),
            group_world_size=st.just(2),
            restart_count=st.integers(0, 3),
        ),
        st.builds(
            core.RendezvousFailed,
            now=_now(),
            reason=st.just("lost"),
            kind=st.sampled_from(["timeout", "connection", "corrupt"]),
        ),
        st.builds(core.WorkersSucceeded, now=_now()),
        st.builds(core.WorkersFailed, now=_now(), failures=_failures(2)),
        st.builds(core.WorkerStuck, now=_now(), local_rank=st.integers(0, 1), idle_for=_now()),
        st.builds(core.NodesWaiting, now=_now(), count=st.integers(0, 2)),
        st.builds(
            core.NextRoundOpened, now=_now(), round=st.integers(0, 5), reason=st.just("scale_up")
        ),
        st.builds(
            core.AttemptOpened,
            now=_now(),
            round=st.integers(0, 4),
            attempt=st.integers(1, 3),
            reason=st.just("worker failed"),
        ),
        st.builds(core.KeepAliveLapsed, now=_now(), reason=st.just("lapsed")),
        st.builds(core.KeepAliveRestored, now=_now()),
        st.builds(core.TimePassed, now=_now()),
        st.builds(core.ExitBarrierRead, now=_now(), arrived=st.integers(0, 3)),
        st.builds(
            core.RendezvousClosed, now=_now(), outcome=st.sampled_from(["succeeded", "failed"])
        ),
        st.builds(core.SignalReceived, now=_now(), signum=st.sampled_from([2, 15])),
    )


@given(
    in_place=st.booleans(),
    max_restarts=st.integers(0, 3),
    run=st.lists(_events(), max_size=30),
)
def test_the_core_returns_no_effect_type_outside_the_table(
    in_place: bool, max_restarts: int, run: list[object]
) -> None:
    config = core.AgentConfig(
        max_restarts=max_restarts,
        min_nodes=1,
        max_nodes=2,
        local_world_size=2,
        restart_in_place=in_place,
    )
    state = core.initial_state(config)
    for event in run:
        result = core.step(state, event, config)  # type: ignore[arg-type]
        for effect in result.effects:
            assert type(effect) in EFFECT_TYPES, f"{effect!r} has no handler"
        state = result.state


def _spec() -> WorkerSpec:
    config = RendezvousConfig(min_nodes=1, max_nodes=2)
    handler = DynamicRendezvousHandler("table", MemoryStore(), config, backend_name="memory")
    return WorkerSpec("default", local_world_size=1, rdzv_handler=handler, entrypoint="true")


def test_a_built_agent_has_a_handler_for_every_effect_type() -> None:
    agent = LocalElasticAgent(_spec())
    assert set(agent._effects) == set(EFFECT_TYPES)
    assert all(callable(handler) for handler in agent._effects.values())


def test_a_table_missing_a_handler_or_holding_an_unknown_one_is_refused() -> None:
    def handle(effect: object) -> None:
        raise AssertionError("not called")

    full = dict.fromkeys(EFFECT_TYPES, handle)
    check_covers(full)
    without = {t: h for t, h in full.items() if t is not core.OpenAttempt}
    with pytest.raises(TypeError, match="no handler for OpenAttempt"):
        check_covers(without)
    with pytest.raises(TypeError, match="never returns: int"):
        check_covers({**full, int: handle})
