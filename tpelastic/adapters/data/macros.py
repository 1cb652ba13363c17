"""Placeholders in worker arguments, filled in per worker by the agent.

A worker argument may contain ``${name}`` for one of :data:`SUPPORTED`; :func:`substitute`
replaces each with the worker's value. Placeholders whose name is not supported are left as they
are, so arguments meant for something else (a shell, a config system) pass through unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

LOCAL_RANK = "${local_rank}"
"""The worker's rank on its node; the one placeholder every agent fills in."""

SUPPORTED = ("local_rank", "rank", "group_rank", "world_size", "local_world_size", "role")
"""Names usable as ``${name}``; all but ``local_rank`` need the agent to supply a value."""

_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class Macros:
    """The supported placeholders as attributes, for building argument lists in code."""

    local_rank = LOCAL_RANK
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
    """A copy of ``args`` with each supported ``${name}`` in a string argument filled in.

    Args:
        args: worker arguments; non-string items are passed through untouched.
        local_rank: value for ``${local_rank}``.
        values: values for the other supported names (``rank``, ``world_size``, ...).

    Raises:
        ValueError: if ``values`` names something unsupported, or an argument uses a supported
            placeholder that has no value here (so a worker never sees a literal ``${rank}``).
    """
    known: dict[str, str] = {"local_rank": str(local_rank)}
    for name, value in (values or {}).items():
        if name not in SUPPORTED:
            raise ValueError(f"unknown macro {name!r}; supported: {', '.join(SUPPORTED)}")
        known[name] = str(value)

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in SUPPORTED:
            return match.group(0)
        if name not in known:
            raise ValueError(f"worker argument uses ${{{name}}} but no value was given for it")
        return known[name]

    return [_PLACEHOLDER.sub(fill, a) if isinstance(a, str) else a for a in args]
