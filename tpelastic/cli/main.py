"""The ``tpelastic`` command: one subcommand per module under ``tpelastic/cli``.

This layer only parses arguments and hands them on; errors that are the user's fault end as one
line on stderr and exit code 2 (see :mod:`tpelastic.cli.errors`).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from tpelastic.cli.errors import UsageError, exit_with

# Imported only when used: ``tpelastic run`` must start fast, and the simulator, the spec
# exporter and the store server are not needed to launch a job.
SUBCOMMANDS = {
    "run": "tpelastic.cli.run",
    "demo": "tpelastic.cli.demo",
    "sim": "tpelastic.cli.sim",
    "spec": "tpelastic.cli.spec",
    "store": "tpelastic.cli.store",
}


def subcommand(name: str) -> ModuleType:
    return importlib.import_module(SUBCOMMANDS[name])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tpelastic",
        description="Elastic, fault-tolerant distributed training for tensorplay.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMANDS:
        subcommand(name).add_parser(commands, name)
    return parser


def finish(code: int) -> int:
    """Get ready for the process to exit with ``code``, and return it.

    Only for a process about to exit: the objects alive now are frozen out of the garbage
    collector, so the interpreter's teardown does not walk them all again (about 15 ms of
    every ``tpelastic run``, measured in docs/benchmarks-launcher.md). Nothing is lost:
    finalizers are not guaranteed at exit anyway, and logging flushes through ``atexit``.
    """
    gc.freeze()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """The ``tpelastic`` command; ``argv`` None reads ``sys.argv`` (the command line itself)."""
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["run"]:  # ``run`` parses its own argv: script args pass untouched
        if argv is None:
            gc.disable()  # for the imports only: ``run.main`` turns it back on (see tpelastic.run)
        code = int(subcommand("run").main(given))
    else:
        code = _dispatch(given)
    return finish(code) if argv is None else code


def _dispatch(given: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(given)
    try:
        return int(subcommand(args.command).run(args) or 0)
    except UsageError as error:
        return exit_with(error)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
