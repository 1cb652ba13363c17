"""The warm interpreter: imports the worker's framework, then waits to become the worker.

Run as ``python [the worker's options] -c LOADER FD PATH0 IMPORTS`` (see ``warm.py``), with
the job's base environment and the agent's cwd. It sets ``sys.path[0]`` to what the worker's
will be (so imports resolve as the script's would), imports each module of ``IMPORTS``
(comma-separated) that exists, holding its own output in memory meanwhile, and writes one byte to
the socket ``FD``: ``R`` ready, ``F`` an import failed. It then waits for the
hand-over: one message with the worker's environment, argv, cwd and ``sys.path[0]``, and two
file descriptors for its stdout and stderr. It puts them in place, writes the held output to
them, and runs the script or module as ``python script.py`` / ``python -m module`` would: a
fresh ``__main__``, the same exit codes, signals and tracebacks (its own frames left out).
A socket closed without a hand-over means the agent no longer needs it: it exits 0.

Standard library only, and nothing of tpelastic: the worker's modules are the user's.
"""

from __future__ import annotations

import builtins
import importlib.machinery
import importlib.util
import json
import os
import socket
import sys
from typing import Any

HERE = os.path.abspath(__file__)
SPARE_NAME = "tp-warm-spare"  # the process name (``ps``, /proc/PID/comm) until the hand-over
_MAX_MESSAGE = 1 << 22  # one hand-over: an environment, argv and paths


def _import_all(names: list[str]) -> bool:
    for name in names:
        try:
            if importlib.util.find_spec(name) is None:
                continue
        except (ImportError, ValueError):
            continue
        try:
            __import__(name)
        except BaseException:  # the worker would meet it too, but on its own terms
            return False
    return True


def _hold(fd: int, name: str) -> int:
    """Point ``fd`` at a memory file, returning it; what is written meanwhile is kept."""
    held = os.memfd_create(name)
    os.dup2(held, fd)
    return held


def _release(held: int, fd: int) -> None:
    """Copy what ``held`` kept to ``fd`` (its new target) and close it."""
    os.lseek(held, 0, os.SEEK_SET)
    while chunk := os.read(held, 1 << 16):
        os.write(fd, chunk)
    os.close(held)


def _rename(name: str) -> str:
    """Set this process's name, returning the one it had ("" where /proc is not there)."""
    try:
        with open("/proc/self/comm", "r+", encoding="utf-8") as comm:
            old = comm.read().rstrip("\n")
            comm.seek(0)
            comm.write(name)
        return old
    except OSError:
        return ""


def _strip(tb: Any) -> Any:
    # The loader's and this module's frames lead every traceback; ``python script.py`` has none.
    while tb is not None and tb.tb_frame.f_code.co_filename in (HERE, "<string>"):
        tb = tb.tb_next
    return tb


def _fresh_main(script: str | None) -> dict[str, Any]:
    """``__main__``'s namespace as the interpreter makes it for a script (or before ``-m``)."""
    main = sys.modules["__main__"].__dict__
    main.clear()
    main.update(
        __name__="__main__",
        __doc__=None,
        __package__=None,
        __loader__=importlib.machinery.BuiltinImporter,
        __spec__=None,
        __annotations__={},
        __builtins__=builtins,
    )
    if script is not None:
        path = os.path.abspath(script)
        main["__loader__"] = importlib.machinery.SourceFileLoader("__main__", path)
        main["__file__"] = path
        main["__cached__"] = None
    return main


def _run(order: dict[str, Any]) -> None:
    argv = list(order["argv"])
    if order["kind"] == "module":
        import runpy

        sys.argv = ["-m", *argv[1:]]  # as the interpreter has it until runpy finds the module
        _fresh_main(None)
        run_as_main: Any = runpy._run_module_as_main  # type: ignore[attr-defined]  # as -m
        run_as_main(order["target"], alter_argv=True)
        return
    sys.argv = argv
    main = _fresh_main(order["target"])
    with open(main["__file__"], "rb") as src:
        source = src.read()
    exec(compile(source, main["__file__"], "exec"), main)


def main(argv: list[str]) -> int:
    fd, path0, imports = int(argv[0]), argv[1], [n for n in argv[2].split(",") if n]
    sys.path[0] = path0
    own_name = _rename(SPARE_NAME)
    held_out, held_err = _hold(1, "warm-stdout"), _hold(2, "warm-stderr")
    link = socket.socket(fileno=fd)
    # A failed import is reported (the agent then discards this spare) but a hand-over made
    # before the report is still honoured: the script meets the import on its own.
    try:
        link.send(b"R" if _import_all(imports) else b"F")
    except OSError:
        pass  # the agent closed its end: after a hand-over (queued below) or to discard us
    try:
        data, fds, _flags, _addr = socket.recv_fds(link, _MAX_MESSAGE, 2)
    except OSError:
        return 0
    if not data or len(fds) != 2:
        return 0  # not needed any more
    link.close()
    order = json.loads(data)
    if own_name:
        _rename(own_name)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for given in fds:
        os.close(given)
    _release(held_out, 1)
    _release(held_err, 2)
    stdout: Any = sys.stdout
    if not stdout.write_through:  # -u, or PYTHONUNBUFFERED, writes through already
        # Line-buffered on a terminal, as the interpreter decides for its stdout at start.
        stdout.reconfigure(line_buffering=os.isatty(1))
    os.chdir(order["cwd"])
    env = order["env"]
    # What changed this interpreter's environment since it was started (the command prefix's
    # shell fixing PWD, an import setting a variable) changes the worker's the same way.
    spawn_env = order["spawn_env"]
    for key in {*spawn_env, *os.environ}:
        if os.environ.get(key) != spawn_env.get(key):
            if key in os.environ:
                env[key] = os.environ[key]
            else:
                env.pop(key, None)
    os.environ.clear()
    os.environ.update(env)
    sys.path[0] = order["path0"]
    sys.modules.pop("_tpelastic_warm_boot", None)
    try:
        _run(order)
    except SystemExit:
        raise
    except BaseException:
        # Re-raised to the interpreter, which prints it (through the script's own excepthook)
        # and exits as it would for the script: 1, or by SIGINT for a KeyboardInterrupt.
        hook = sys.excepthook

        def without_boot_frames(kind: Any, value: Any, tb: Any) -> None:
            tb = _strip(tb)
            if isinstance(value, BaseException):
                value.__traceback__ = tb  # what the interpreter's printer shows
            hook(kind, value, tb)

        sys.excepthook = without_boot_frames
        raise
    return 0
