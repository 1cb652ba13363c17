"""Plain values shared by every machine of the core.

Time is a float count of seconds on the *observer's own* monotonic clock (``Instant``); the core
never reads a clock, so every instant arrives as an argument. Instants from different nodes are
never compared: shared state holds counters, not times.
"""

from __future__ import annotations

from typing import TypeAlias

from attrs import NOTHING, field, frozen

Instant: TypeAlias = float
"""Seconds on one node's monotonic clock. Only ever compared with instants of the same node."""

Duration: TypeAlias = float
"""A span of seconds."""

NodeId: TypeAlias = str
"""A node's identity in a run: unique per agent process, stable while that agent lives."""


def value_repr(self: object) -> str:
    """The ``__repr__`` attrs would generate, computed from the class's fields at call time.

    A value class sets ``__repr__ = value_repr`` in its body, so attrs keeps it (its
    ``auto_detect``) instead of compiling a repr of its own: compiling is most of what creating
    an attrs class costs, and the repr alone is about 0.1 ms of every launch per class (issue 5,
    docs/benchmarks-launcher.md). The output is attrs' own, ``Name(a=1, b='x')``: fields with
    ``repr=False`` are left out and a field's own repr callable is used. Unlike attrs it has no
    guard against a value that contains itself, which a frozen value of plain fields cannot.

    Raises:
        AttributeError: ``self`` is not an instance of an attrs class.
    """
    cls = type(self)
    parts = []
    for attribute in cls.__attrs_attrs__:  # type: ignore[attr-defined]
        if attribute.repr is False:
            continue
        shown = repr if attribute.repr is True else attribute.repr
        parts.append(f"{attribute.name}={shown(getattr(self, attribute.name, NOTHING))}")
    return f"{cls.__qualname__.rsplit('>.', 1)[-1]}({', '.join(parts)})"


def value_eq(self: object, other: object) -> bool:
    """The ``__eq__`` attrs would generate: same class, and equal fields (those with ``eq``).

    Set as ``__eq__ = value_eq`` with ``__hash__ = value_hash`` for the reason given in
    ``value_repr``: attrs then compiles neither (another 0.1 ms per class at import). A field's
    ``eq_key`` is applied as attrs does; another class gives ``NotImplemented``.
    """
    if other.__class__ is not self.__class__:
        return NotImplemented  # type: ignore[no-any-return]
    for attribute in self.__attrs_attrs__:  # type: ignore[attr-defined]
        if not attribute.eq:
            continue
        mine, theirs = getattr(self, attribute.name), getattr(other, attribute.name)
        if attribute.eq_key is not None:
            mine, theirs = attribute.eq_key(mine), attribute.eq_key(theirs)
        if not mine == theirs:
            return False
    return True


def value_hash(self: object) -> int:
    """The ``__hash__`` that goes with ``value_eq``: the class and the fields it compares.

    Like attrs', equal values hash alike and the number differs from process to process.
    """
    cls = type(self)
    parts: list[object] = [cls.__module__, cls.__qualname__]
    for attribute in cls.__attrs_attrs__:  # type: ignore[attr-defined]
        if attribute.hash is True or (attribute.hash is None and attribute.eq is True):
            value = getattr(self, attribute.name)
            parts.append(value if attribute.eq_key is None else attribute.eq_key(value))
    return hash(tuple(parts))


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

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    machine: str
    phase: str
    event: str
    reason: str


@frozen(kw_only=True)
class Emit:
    """Effect: tell the outside world something happened (log line, event record, metric)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    name: str
    fields: tuple[tuple[str, object], ...] = field(default=())

    def as_dict(self) -> dict[str, object]:
        return dict(self.fields)


__all__ = [
    "Duration",
    "Emit",
    "Instant",
    "NodeId",
    "Rejected",
    "_positive",
    "value_eq",
    "value_hash",
    "value_repr",
]
