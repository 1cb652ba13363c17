"""argparse's parser for ``tpelastic run``, built from the flag table in :mod:`run_flags`.

Used for ``--help``, for errors, and for any command line :func:`run_flags.quick_parse` leaves
to it; a plain launch does not import argparse at all (see :mod:`tpelastic.cli.run_flags`).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn

from tpelastic.cli.errors import UsageError
from tpelastic.cli.run_flags import FLAGS, default, dest, spellings

PROG = "tpelastic run"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size`` finds it ($COLUMNS, stdout, 80)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _Formatter(argparse.HelpFormatter):
    """argparse's help, with the width found without importing ``shutil``.

    argparse makes a formatter for every flag added and, given no width, imports ``shutil``
    (with ``bz2`` and ``lzma``) to ask the terminal's: about 1.5 ms (issue 5).
    """

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        width = _columns() - 2 if width is None else width
        super().__init__(prog, indent_increment, max_help_position, width)


def build_parser() -> argparse.ArgumentParser:
    """argparse's parser of ``tpelastic run``: every flag of ``run_flags.FLAGS``, the script,
    and the script's arguments (everything after it, untouched)."""
    parser = _Parser(
        prog=PROG,
        allow_abbrev=False,
        description="Launch one node's elastic agent.",
        formatter_class=_Formatter,
    )
    for name, shorts, switch, given, text in FLAGS:
        options = spellings(name, shorts)
        value = default(name, switch, given)
        if switch:
            parser.add_argument(
                *options, dest=dest(name), action="store_true", default=value, help=text
            )
        else:
            parser.add_argument(*options, dest=dest(name), default=value, help=text)
    parser.add_argument("training_script", help="the script (or module, or program) to run")
    parser.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return parser


__all__ = ["PROG", "build_parser"]
