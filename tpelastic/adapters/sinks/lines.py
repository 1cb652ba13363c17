"""Writing one line to a console stream, the way every console sink does."""

from __future__ import annotations

from typing import IO


def write_line(stream: IO[str], line: str) -> None:
    """Write ``line`` and a newline, then flush. A closed or broken stream is ignored: a sink must
    never take its caller (the agent, a worker) down."""
    try:
        stream.write(line + "\n")
        stream.flush()
    except (OSError, ValueError):
        pass
