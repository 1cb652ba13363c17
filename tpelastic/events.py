"""Events: Event, NodeState, RdzvEvent, record and the event handlers.

This module is the public import path for these names; they are defined under
``tpelastic.adapters.sinks.events`` and re-exported here. The JSON-lines schema is in
docs/observability.md. ``replay_agent_events`` (and ``ReplayMismatch``, ``Replayed``) check an
agent's recorded steps against the core; they are loaded on first use, since they bring in the
core's agent table; ``replay_join_events`` (``JoinReplayMismatch``, ``ReplayedJoin``) does the
same for the rendezvous join's recorded steps.
"""

from typing import TYPE_CHECKING, Any

from tpelastic.adapters.sinks.events import (
    SCHEMA_VERSION,
    ConsoleEventHandler,
    Event,
    EventHandler,
    EventSource,
    JsonLinesEventHandler,
    LoggingEventHandler,
    NodeState,
    NullEventHandler,
    RdzvEvent,
    construct_and_record_rdzv_event,
    event_from_emit,
    from_json_dict,
    get_event_handler,
    read_json_lines,
    record,
    to_json_dict,
    to_json_line,
)

if TYPE_CHECKING:
    from tpelastic.adapters.sinks.agent_trace import Replayed, ReplayMismatch, replay_agent_events
    from tpelastic.adapters.sinks.join_trace import (
        JoinReplayMismatch,
        ReplayedJoin,
        replay_join_events,
    )

_REPLAY = ("ReplayMismatch", "Replayed", "replay_agent_events")
_JOIN_REPLAY = ("JoinReplayMismatch", "ReplayedJoin", "replay_join_events")


def __getattr__(name: str) -> Any:
    if name in _REPLAY:
        from tpelastic.adapters.sinks import agent_trace

        return getattr(agent_trace, name)
    if name in _JOIN_REPLAY:
        from tpelastic.adapters.sinks import join_trace

        return getattr(join_trace, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "JoinReplayMismatch",
    "ReplayMismatch",
    "ReplayedJoin",
    "Replayed",
    "SCHEMA_VERSION",
    "ConsoleEventHandler",
    "Event",
    "EventHandler",
    "EventSource",
    "JsonLinesEventHandler",
    "LoggingEventHandler",
    "NodeState",
    "NullEventHandler",
    "RdzvEvent",
    "construct_and_record_rdzv_event",
    "event_from_emit",
    "from_json_dict",
    "get_event_handler",
    "read_json_lines",
    "record",
    "replay_agent_events",
    "replay_join_events",
    "to_json_dict",
    "to_json_line",
]
