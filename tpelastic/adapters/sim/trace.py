"""A simulated run's records as the launcher's event stream (JSON lines, schema version 1).

Each record becomes an :class:`~tpelastic.adapters.sinks.events.Event` whose ``timestamp`` is the
run's virtual time in seconds and whose metadata carries the node and the record's fields plus
``"simulated": true``, so a reader can tell a simulated stream from a real one.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from tpelastic.adapters.sinks.events import Event, EventSource, to_json_line
from tpelastic.core.sim.cluster import SimRecord


def record_to_event(record: SimRecord) -> Event:
    """The event for one simulation record."""
    metadata: dict[str, object] = {"node": record.node, "simulated": True}
    metadata.update(dict(record.fields))
    return Event(name=record.name, source=EventSource.AGENT, timestamp=record.t, metadata=metadata)


def write_trace(records: Iterable[SimRecord], path: str | os.PathLike[str]) -> int:
    """Write every record as one JSON line to ``path`` (replacing it); return how many.

    Raises:
        OSError: the file cannot be written.
    """
    count = 0
    with open(path, "w", encoding="utf-8") as fh:
        for record in records:
            fh.write(to_json_line(record_to_event(record)) + "\n")
            count += 1
    return count
