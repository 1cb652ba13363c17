"""Every machine of the core, in the order specs/ lists them."""

from __future__ import annotations

from tpelastic.core.table import Table


def all_tables() -> tuple[Table, ...]:
    """The validated tables of every machine (each is built once, at its module's import)."""
    tables: list[Table] = []
    return tuple(tables)
