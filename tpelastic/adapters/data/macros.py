"""Placeholders in worker arguments, filled in per worker by the agent (torch's ``macros``).

A worker argument may contain ``${local_rank}`` (or ``$local_rank``); :func:`substitute` replaces it
with the worker's local rank exactly as torch's ``macros.substitute`` does (``string.Template``'s
``safe_substitute``: ``$$`` becomes ``$``, any other placeholder is left as it is). The agent may
also pass values for the other names of :data:`SUPPORTED`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from string import Template

local_rank = "${local_rank}"
"""The worker's rank on its node; the one placeholder every agent fills in."""

LOCAL_RANK = local_rank

SUPPORTED = ("local_rank", "rank", "group_rank", "world_size", "local_world_size", "role")
"""Names usable as ``${name}``; all but ``local_rank`` need the agent to supply a value."""


class Macros:
    """torch's ``macros`` class (``tpelastic.data.macros``): the placeholders as attributes."""

    SUPPORTED = SUPPORTED
    local_rank = local_rank
    rank = "${rank}"
    group_rank = "${group_rank}"
    world_size = "${world_size}"
    local_world_size = "${local_world_size}"
    role = "${role}"

    @staticmethod
    def substitute(
        args: Sequence[object], local_rank: int | str, values: Mapping[str, object] | None = None
    ) -> list[object]:
        """See :func:`substitute`."""
        return substitute(args, local_rank, values)


def substitute(
    args: Sequence[object], local_rank: int | str, values: Mapping[str, object] | None = None
) -> list[object]:
    """A copy of ``args`` with ``${local_rank}`` (and ``values``' names) filled in string items.

    Args:
        args: worker arguments; non-string items are passed through untouched.
        local_rank: value for ``${local_rank}`` / ``$local_rank``.
        values: values for the other supported names (``rank``, ``world_size``, ...).

    Raises:
        ValueError: if ``values`` names something outside :data:`SUPPORTED`.
    """
    known: dict[str, object] = {}
    for name, value in (values or {}).items():
        if name not in SUPPORTED:
            raise ValueError(f"unknown macro {name!r}; supported: {', '.join(SUPPORTED)}")
        known[name] = value
    known["local_rank"] = local_rank
    return [Template(a).safe_substitute(known) if isinstance(a, str) else a for a in args]
