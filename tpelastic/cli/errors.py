"""One-line errors for the command line: the user's mistake is named, never a traceback."""

from __future__ import annotations

import sys

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input from the person at the keyboard: printed as one line, exit code 2."""


def exit_with(error: UsageError, prog: str = "tpelastic") -> int:
    print(f"{prog}: error: {error}", file=sys.stderr)
    return EXIT_USAGE
