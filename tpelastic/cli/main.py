"""The ``tpelastic`` command: one subcommand per module under ``tpelastic/cli``.

This layer only parses arguments and hands them on; errors that are the user's fault end as one
line on stderr and exit code 2 (see :mod:`tpelastic.cli.errors`).
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, NoReturn

from tpelastic.cli.errors import UsageError, exit_with

if TYPE_CHECKING:
    import argparse

# Imported only when used: ``tpelastic run`` must start fast, and the simulator, the spec
# exporter and the store server are not needed to launch a job.
SUBCOMMANDS = {
    "run": "tpelastic.cli.run",
    "demo": "tpelastic.cli.demo",
    "sim": "tpelastic.cli.sim",
    "spec": "tpelastic.cli.spec",
    "store": "tpelastic.cli.store",
    "status": "tpelastic.cli.status",
}


def subcommand(name: str) -> ModuleType:
    return importlib.import_module(SUBCOMMANDS[name])


def build_parser() -> argparse.ArgumentParser:
    import argparse  # not for ``tpelastic run``, which reads its own command line

    parser = argparse.ArgumentParser(
        prog="tpelastic",
        description="Elastic, fault-tolerant distributed training for tensorplay.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMANDS:
        subcommand(name).add_parser(commands, name)
    return parser


# How long finish waits for threads that are not daemons, in all.
_THREADS_WAIT = 1.0


def finish(code: int) -> NoReturn:
    """End the process with exit status ``code``, skipping the interpreter's teardown.

    Only for a process that is done: the ``tpelastic`` command and ``python -m tpelastic.run``
    call it last. It does what a normal exit does that anyone can see, in the same order:
    waits for non-daemon threads (at most 1 s in all, so a thread stuck in a blocking call
    cannot keep a finished launcher alive: specs/exit.md), runs the
    ``atexit`` handlers (logging flushes its handlers there) and flushes stdout and stderr;
    then ``os._exit``, which spares the teardown of every module and object (about 3 ms of
    every ``tpelastic run``; freezing the heap first saved another 15, see
    docs/benchmarks-launcher.md). Files the process left open and unflushed would lose what
    they buffered, as at any ``os._exit``: the launch path's own files are unbuffered, flushed
    per line or closed (event sink, tee logs). A stdout that cannot be flushed (a closed
    pipe) is not an error here; the exit status stays ``code``.
    """
    gc.freeze()
    main = threading.main_thread()
    others = [t for t in threading.enumerate() if t is not main and not t.daemon]
    for thread in others:  # ours end at once; one stuck in a call must not hold the exit
        thread.join(_THREADS_WAIT / len(others))
    atexit._run_exitfuncs()  # CPython's own hook for this; runs and clears the handlers
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


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
