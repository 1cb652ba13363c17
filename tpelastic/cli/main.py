"""The ``tpelastic`` command: one subcommand per module under ``tpelastic/cli``.

This layer only parses arguments and hands them on; errors that are the user's fault end as one
line on stderr and exit code 2 (see :mod:`tpelastic.cli.errors`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tpelastic.cli import demo, spec
from tpelastic.cli import run as run_command
from tpelastic.cli import sim as sim_command
from tpelastic.cli import store as store_command
from tpelastic.cli.errors import UsageError, exit_with

SUBCOMMANDS = {"demo": demo, "spec": spec, "store": store_command}
SUBCOMMANDS["sim"] = sim_command
SUBCOMMANDS["run"] = run_command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tpelastic",
        description="Elastic, fault-tolerant distributed training for tensorplay.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in SUBCOMMANDS.items():
        module.add_parser(commands, name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if run_command.handles(argv):  # ``run`` parses its own argv: script args pass untouched
        return run_command.main(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(SUBCOMMANDS[args.command].run(args) or 0)
    except UsageError as error:
        return exit_with(error)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
