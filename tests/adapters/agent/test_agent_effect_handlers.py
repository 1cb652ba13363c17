"""Every effect the core agent can return has a handler on the run loop.

The loop finds a handler by name (``_do_<EffectType>``) only when the effect comes, so a handler
lost or misnamed when the handlers moved between modules (loop, effect_handlers, in_place) would
show only as a ``TypeError`` in a live agent; this checks the names ahead of that.
"""

from __future__ import annotations

import inspect

import attrs

from tpelastic.adapters.agent.effect_handlers import EffectHandlers
from tpelastic.adapters.agent.in_place import InPlaceRestarts
from tpelastic.adapters.agent.loop import SimpleElasticAgent
from tpelastic.core.agent import events
from tpelastic.core.values import Emit, Rejected


def _agent_effects() -> list[type]:
    defined_here = [
        cls
        for _, cls in inspect.getmembers(events, inspect.isclass)
        if cls.__module__ == events.__name__ and attrs.has(cls)
    ]
    return [cls for cls in defined_here if cls not in events.AGENT_EVENTS] + [Emit, Rejected]


def test_every_agent_effect_has_a_handler_from_a_mixin() -> None:
    effects = _agent_effects()
    assert {"JoinRendezvous", "StartWorkers", "OpenAttempt", "ReportFailure"} <= {
        e.__name__ for e in effects
    }
    for effect in effects:
        name = f"_do_{effect.__name__}"
        handler = getattr(SimpleElasticAgent, name, None)
        assert handler is not None, f"SimpleElasticAgent cannot carry out {effect.__name__}"
        owners = [c for c in (EffectHandlers, InPlaceRestarts) if name in vars(c)]
        assert owners, f"{name} is not in effect_handlers or in_place"
