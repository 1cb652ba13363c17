"""Events: Event, NodeState, RdzvEvent, record and the event handlers.

This module is the public import path for these names; they are defined under
``tpelastic.adapters.sinks.events`` and re-exported here. The JSON-lines schema is in
docs/observability.md.
"""

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
    event_from_emit,
    from_json_dict,
    get_event_handler,
    read_json_lines,
    record,
    to_json_dict,
    to_json_line,
)

__all__ = [
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
    "event_from_emit",
    "from_json_dict",
    "get_event_handler",
    "read_json_lines",
    "record",
    "to_json_dict",
    "to_json_line",
]
