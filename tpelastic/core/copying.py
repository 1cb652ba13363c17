"""Copying frozen values with some fields changed: ``attrs.evolve``, faster where it is safe.

Every step of a machine copies its state with a few fields changed. ``attrs.evolve`` reads
every field through introspection and calls ``__init__``, which is most of a step's cost at
scale (the simulator steps 10,000 nodes' joins; a real closer does one step per member). For a
frozen slotted attrs class without converters, ``__attrs_post_init__`` or a cached hash, a copy
is a new instance whose slots are filled from the old one, then the changes; every validator
then runs on the new values, as ``__init__`` would run them. Other classes get ``attrs.evolve``.

The per-class copy function is generated code (as attrs generates its ``__init__``): one slot
write per field, with no loop over field names.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

import attrs

T = TypeVar("T")

# (copy of an instance, its field descriptors by the name evolve takes, the validators to run)
_Copier = tuple[
    Callable[[Any], Any],
    dict[str, Callable[[Any, Any], None]],
    tuple[tuple[Callable[..., Any], Any], ...],
]


def evolve(inst: T, **changes: Any) -> T:
    """``attrs.evolve(inst, **changes)``: the same result, the same validation, faster.

    Raises:
        TypeError: a change names no field (as ``attrs.evolve`` does).
    """
    made = _copier(type(inst))  # type: ignore[arg-type]
    if made is None:
        return attrs.evolve(inst, **changes)  # type: ignore[misc]
    copy, setters, validators = made
    new = copy(inst)
    for name, value in changes.items():
        setter = setters.get(name)
        if setter is None:
            raise TypeError(f"{type(inst).__name__} has no field {name!r} to evolve")
        setter(new, value)
    for validator, attribute in validators:
        validator(new, attribute, getattr(new, attribute.name))
    return new  # type: ignore[no-any-return]


def copy_with_phase(cls: type) -> Callable[[Any, Any], Any] | None:
    """A function ``(state, phase) -> copy with that phase`` for ``cls``, or None where a plain
    ``attrs.evolve`` is needed. No validator runs: every other field comes from an instance that
    passed them, and ``phase`` (which has none) from a validated table."""
    made = _copier(cls)
    if made is None or "phase" not in made[1]:
        return None
    if any(attribute.name == "phase" for _validator, attribute in made[2]):
        return None
    copy, setters, _validators = made
    put = setters["phase"]

    def with_phase(state: Any, value: Any) -> Any:
        new = copy(state)
        put(new, value)
        return new

    return with_phase


@cache
def _copier(cls: type) -> _Copier | None:
    """The copy function of ``cls`` and what :func:`evolve` needs (None: not safe; see the
    module docstring). Kept per class for the process's life (classes are few and immortal)."""
    if not attrs.has(cls) or hasattr(cls, "__attrs_post_init__"):
        return None
    slots = cls.__dict__.get("__slots__")
    if slots is None or "__dict__" in slots:
        return None
    fields = attrs.fields(cls)
    if any(f.converter is not None for f in fields) or any("cached_hash" in s for s in slots):
        return None
    descriptors = {}
    for f in fields:
        descriptor = _slot(cls, f.name)
        if descriptor is None:
            return None
        descriptors[f.name] = descriptor
    names = [f"d{i}" for i in range(len(fields))]
    lines = ["def copy(state):", "    new = make(cls)"]
    lines += [f"    {n}(new, state.{f.name})" for n, f in zip(names, fields, strict=True)]
    lines.append("    return new")
    scope: dict[str, Any] = {"make": object.__new__, "cls": cls}
    scope.update({n: descriptors[f.name].__set__ for n, f in zip(names, fields, strict=True)})
    exec(compile("\n".join(lines), f"<copy {cls.__qualname__}>", "exec"), scope)
    setters = {(f.alias or f.name): descriptors[f.name].__set__ for f in fields}
    validators = tuple((f.validator, f) for f in fields if f.validator is not None)
    return scope["copy"], setters, validators


def _slot(cls: type, name: str) -> Any:
    """The slot descriptor of field ``name`` on ``cls`` or a base (None: not a slot)."""
    for klass in cls.__mro__:
        descriptor = klass.__dict__.get(name)
        if descriptor is not None:
            return descriptor if type(descriptor).__name__ == "member_descriptor" else None
    return None
