"""Launcher shim: ``python -I -S shim.py AGENT_PID [--cgroup PROCS] -- COMMAND ARGS...``.

Runs between the agent's fork and the worker's exec. It asks Linux to SIGKILL this process when
its parent (the agent) dies, then replaces itself with COMMAND, so the worker keeps the shim's
pid and the parent-death signal (both survive exec). With ``--cgroup`` it first writes its pid
to that ``cgroup.procs``, so the worker and all it starts are in the group's cgroup. Doing
this here rather than in a ``preexec_fn`` keeps the agent's fork free of Python code, which
is unsafe once the agent has threads. Standard library only, and started with ``-S`` so it
costs a few milliseconds.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent thread exits.

    Returns False where prctl is not available (not Linux); the watchdog still covers that case.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def enter_cgroup(procs: str | None) -> None:
    """Move this process into the cgroup whose ``cgroup.procs`` is ``procs`` (None: stay);
    a refusal leaves it where it is."""
    if procs is None:
        return
    try:
        with open(procs, "w", encoding="ascii") as dst:
            dst.write(str(os.getpid()))
    except OSError:
        pass


def main(argv: list[str]) -> int:
    """Parse ``AGENT_PID [--cgroup PROCS] -- COMMAND...``, arm the death signal, enter the
    cgroup and exec the command."""
    procs = None
    if len(argv) > 2 and argv[1] == "--cgroup":
        procs, argv = argv[2], [argv[0], *argv[3:]]
    if len(argv) < 3 or argv[1] != "--":
        print("tpelastic shim: usage: shim.py AGENT_PID -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    agent_pid = int(argv[0])
    set_parent_death_signal()
    enter_cgroup(procs)
    # The agent may have died before prctl took effect; then nobody would ever signal us.
    if os.getppid() != agent_pid:
        return 1
    command = argv[2:]
    try:
        os.execvp(command[0], command)
    except OSError as err:
        print(f"tpelastic: cannot run {command[0]!r}: {err.strerror}", file=sys.stderr)
        return 126 if isinstance(err, PermissionError) else 127
    return 0  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
