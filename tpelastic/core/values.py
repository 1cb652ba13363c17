"""Plain values shared by every machine of the core.

Time is a float count of seconds on the *observer's own* monotonic clock (``Instant``); the core
never reads a clock, so every instant arrives as an argument. Instants from different nodes are
never compared: shared state holds counters, not times.
"""

from __future__ import annotations

from typing import TypeAlias

from attrs import field, frozen

Instant: TypeAlias = float
"""Seconds on one node's monotonic clock. Only ever compared with instants of the same node."""

Duration: TypeAlias = float
"""A span of seconds."""

NodeId: TypeAlias = str
"""A node's identity in a run: unique per agent process, stable while that agent lives."""


def _positive(_instance: object, attribute: object, value: float) -> None:
    if not value > 0:
        name = getattr(attribute, "name", "value")
        raise ValueError(f"{name} must be > 0, got {value!r}")


@frozen(kw_only=True)
class Rejected:
    """Effect: the event is not allowed in this state; the state is unchanged.

    A closed-world table answers every (state, event) pair it has no row for with this, never
    with a silent no-op.
    """

    machine: str
    phase: str
    event: str
    reason: str


@frozen(kw_only=True)
class Emit:
    """Effect: tell the outside world something happened (log line, event record, metric)."""

    name: str
    fields: tuple[tuple[str, object], ...] = field(default=())

    def as_dict(self) -> dict[str, object]:
        return dict(self.fields)


__all__ = ["Duration", "Emit", "Instant", "NodeId", "Rejected", "_positive"]
