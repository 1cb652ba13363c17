"""Closed-world transition tables: rows as data, checked here, exported through ``transitions``.

Every machine of the core declares its whole behaviour as a tuple of :class:`Row` values. A row
says: in phase ``src``, on an event of type ``on``, when guard ``guard`` holds, run the pure action
``action`` and move to ``dst``. Guards and actions are *named* here and defined as pure functions
in the machine's own module; nothing is registered as a callback with ``transitions``.

:func:`build_table` validates the rows at import with plain checks (phases, events, guard and
action names, terminal phases, duplicate rows) and compiles them into a dict, so the table stays
the single source of truth and stepping stays fast. ``transitions`` is the declared engine of the
tables: :func:`tpelastic.core.export.markup_machine` builds its ``MarkupMachine`` from the same
rows when ``specs/`` is exported and in tests. It is not built at import, because importing and
building it costs the launcher tens of milliseconds at every start.

Stepping rules (each generated table in ``specs/tables/`` repeats the first one):

* No row for (phase, event type): the event is rejected, the state is unchanged and a
  :class:`~tpelastic.core.values.Rejected` effect says why.
* Among the rows for (phase, event type) at most one guarded row may match; an unguarded row is
  the "otherwise" branch. If none matches, the event is rejected.
* Two guarded rows matching at once is a bug in the table: :class:`InvalidTransition` is raised.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import Any, Generic, Protocol, TypeVar

import attrs
from attrs import evolve, field, frozen

from tpelastic.core.copying import copy_with_phase
from tpelastic.core.values import Rejected, value_eq, value_hash, value_repr


class InvalidTransition(Exception):
    """A table or step function broke its own rules: always a bug in tpelastic, never bad input."""


class HasPhase(Protocol):
    @property
    def phase(self) -> enum.Enum: ...


S = TypeVar("S", bound=HasPhase)
Guard = Callable[[Any, Any, Any], bool]
Action = Callable[[Any, Any, Any], tuple[Any, tuple[object, ...]]]


@frozen(kw_only=True)
class Row:
    """One transition: ``src --on [guard] / action--> dst``."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    src: enum.Enum
    on: type
    dst: enum.Enum
    guard: str | None = None
    action: str | None = None
    note: str = ""


@frozen(kw_only=True)
class Step(Generic[S]):
    """What every step function returns: the next state and the effects to carry out, in order."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    state: S
    effects: tuple[object, ...] = field(default=())


def _no_action(state: Any, event: Any, config: Any) -> tuple[Any, tuple[object, ...]]:
    return state, ()


# The compiled form of the rows for one (phase, event type): the guarded rows with their guard
# and action functions, in table order, then the unguarded "otherwise" row (if any) with its action.
_Guarded = tuple[tuple[Guard, Row, Action], ...]
_Choice = tuple[_Guarded, tuple[Row, Action] | None]


@frozen(kw_only=True)
class Table:
    """A validated machine: its phases, event types, rows, and the named guards and actions.

    Built by :func:`build_table`, which also compiles the rows into ``_choices``, a dict from
    (phase, event type) to the candidate rows with their guard and action functions resolved:
    a step is one dict lookup, not a scan of the rows or of the name mappings.
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    name: str
    phases: type[enum.Enum]
    initial: enum.Enum
    events: tuple[type, ...]
    rows: tuple[Row, ...]
    guards: Mapping[str, Guard]
    actions: Mapping[str, Action]
    terminal: frozenset[enum.Enum] = field(factory=frozenset)
    doc: str = ""
    _index: Mapping[tuple[enum.Enum, type], tuple[Row, ...]] = field(factory=dict, alias="_index")
    _choices: Mapping[tuple[enum.Enum, type], _Choice] = field(factory=dict, alias="_choices")
    # state class -> its phase setter, made on the first step of each class (a cache, not data).
    _setters: dict[type, Callable[[Any, enum.Enum], Any]] = field(
        factory=dict, alias="_setters", eq=False, repr=False
    )

    def rows_for(self, phase: enum.Enum, event_type: type) -> tuple[Row, ...]:
        return self._index.get((phase, event_type), ())

    def select(self, state: Any, event: Any, config: Any) -> Row | None:
        """The one row that applies to ``event`` in ``state``; None means the event is rejected.

        Raises:
            InvalidTransition: two guarded rows hold at once (a bug in the table).
        """
        chosen = self._choose(state, event, config)
        return chosen[0] if chosen is not None else None

    def _choose(self, state: Any, event: Any, config: Any) -> tuple[Row, Action] | None:
        choice = self._choices.get((state.phase, type(event)))
        if choice is None:
            return None
        guarded, otherwise = choice
        found: tuple[Row, Action] | None = None
        for guard, row, action in guarded:
            # Every guard is evaluated, not just up to the first that holds: two holding at once
            # is a bug in the table, and stepping is where it would show.
            if guard(state, event, config):
                if found is not None:
                    self._overlap(state, event, config)
                found = (row, action)
        return found if found is not None else otherwise

    def _overlap(self, state: Any, event: Any, config: Any) -> None:
        holding = [
            str(r.guard)
            for r in self.rows_for(state.phase, type(event))
            if r.guard and self.guards[r.guard](state, event, config)
        ]
        names = ", ".join(holding)
        raise InvalidTransition(f"{self.name}: guards {names} all hold in {state.phase.name}")

    def step(self, state: S, event: object, config: Any) -> Step[S]:
        """Apply ``event`` to ``state``: the pure heart of every machine.

        Returns the next state and the effects in order; an event without a row leaves the state
        as it is, with one :class:`~tpelastic.core.values.Rejected` effect.

        Raises:
            InvalidTransition: two guarded rows hold at once (a bug in the table).
        """
        chosen = self._choose(state, event, config)
        if chosen is None:
            return Step(state=state, effects=(self.rejection(state, event, config),))
        row, action = chosen
        new_state, effects = action(state, event, config)
        if new_state.phase is not row.dst:
            setter = self._setters.get(type(new_state))
            if setter is None:
                setter = self._setters.setdefault(type(new_state), phase_setter(type(new_state)))
            new_state = setter(new_state, row.dst)
        return Step(state=new_state, effects=tuple(effects))

    def rejection(self, state: Any, event: object, config: Any) -> Rejected:
        event_name = type(event).__name__
        if self.rows_for(state.phase, type(event)):
            reason = "no guard holds"
        elif state.phase in self.terminal:
            reason = f"{state.phase.name} is terminal"
        else:
            reason = f"{event_name} is not expected in {state.phase.name}"
        return Rejected(machine=self.name, phase=state.phase.name, event=event_name, reason=reason)


def phase_setter(cls: type) -> Callable[[Any, enum.Enum], Any]:
    """A function ``(state, phase) -> copy of state with that phase`` for the attrs class ``cls``.

    It is ``attrs.evolve(state, phase=phase)`` without evolve's per-call introspection and
    without re-running validators: every other field is copied from an instance that already
    passed them, and the phase comes from a validated table. Classes where that shortcut would
    be wrong (an ``__attrs_post_init__``, a validator or converter on ``phase``, a cached hash)
    get plain ``evolve``.
    """
    fast = copy_with_phase(cls)
    if fast is not None:
        return fast
    fields_ = attrs.fields(cls)
    phase = attrs.fields_dict(cls).get("phase")
    slots = getattr(cls, "__slots__", ())
    if (
        phase is None
        or phase.validator is not None
        or phase.converter is not None
        or hasattr(cls, "__attrs_post_init__")
        or "__attrs_cached_hash" in slots
        or "_attrs_cached_hash" in slots
    ):
        return lambda state, value: evolve(state, phase=value)
    others = tuple(f.name for f in fields_ if f.name != "phase")
    read: Callable[[Any], tuple[Any, ...]]
    if len(others) > 1:
        read = attrgetter(*others)
    else:
        read = lambda s: tuple(getattr(s, name) for name in others)  # noqa: E731
    put = object.__setattr__
    new = object.__new__

    def with_phase(state: Any, value: enum.Enum) -> Any:
        # object.__setattr__ is how attrs itself fills a frozen instance.
        copy: Any = new(cls)
        for name, item in zip(others, read(state), strict=True):
            put(copy, name, item)
        put(copy, "phase", value)
        return copy

    return with_phase


def _compile(
    index: Mapping[tuple[enum.Enum, type], list[Row]],
    guards: Mapping[str, Guard],
    actions: Mapping[str, Action],
) -> dict[tuple[enum.Enum, type], _Choice]:
    def action_of(row: Row) -> Action:
        return actions[row.action] if row.action else _no_action

    compiled: dict[tuple[enum.Enum, type], _Choice] = {}
    for key, group in index.items():
        guarded = tuple((guards[r.guard], r, action_of(r)) for r in group if r.guard is not None)
        otherwise = next(((r, action_of(r)) for r in group if r.guard is None), None)
        compiled[key] = (guarded, otherwise)
    return compiled


def build_table(
    *,
    name: str,
    phases: type[enum.Enum],
    initial: enum.Enum,
    events: tuple[type, ...],
    rows: tuple[Row, ...],
    guards: Mapping[str, Guard],
    actions: Mapping[str, Action],
    terminal: frozenset[enum.Enum] = frozenset(),
    doc: str = "",
) -> Table:
    """Check ``rows`` and compile them. Raises InvalidTransition on any inconsistency."""
    problems: list[str] = []
    if not isinstance(initial, phases):
        problems.append(f"initial phase {initial!r} is not a member of {phases.__name__}")
    index: dict[tuple[enum.Enum, type], list[Row]] = {}
    for row in rows:
        if not isinstance(row.src, phases) or not isinstance(row.dst, phases):
            problems.append(f"row {row}: phases must be members of {phases.__name__}")
        if row.on not in events:
            problems.append(f"row {row}: {row.on.__name__} is not one of the machine's events")
        if row.guard is not None and row.guard not in guards:
            problems.append(f"row {row}: guard {row.guard!r} is not defined")
        if row.action is not None and row.action not in actions:
            problems.append(f"row {row}: action {row.action!r} is not defined")
        if row.src in terminal:
            problems.append(f"row {row}: {row.src.name} is terminal and may have no outgoing row")
        index.setdefault((row.src, row.on), []).append(row)
    for (src, on), group in index.items():
        unguarded = [r for r in group if r.guard is None]
        if len(unguarded) > 1:
            problems.append(f"{src.name} on {on.__name__}: {len(unguarded)} unguarded rows")
        guard_names = [r.guard for r in group if r.guard is not None]
        if len(guard_names) != len(set(guard_names)):
            problems.append(f"{src.name} on {on.__name__}: a guard is used twice")
    unused = (set(guards) - {r.guard for r in rows}) | (set(actions) - {r.action for r in rows})
    if unused:
        problems.append(f"defined but never used: {sorted(unused)}")
    if problems:
        raise InvalidTransition(f"table {name} is invalid:\n  " + "\n  ".join(problems))
    return Table(
        name=name,
        phases=phases,
        initial=initial,
        events=events,
        rows=rows,
        guards=dict(guards),
        actions=dict(actions),
        terminal=terminal,
        doc=doc,
        _index={key: tuple(group) for key, group in index.items()},
        _choices=_compile(index, guards, actions),
    )
