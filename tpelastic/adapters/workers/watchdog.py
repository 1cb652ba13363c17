"""Watchdog: kills the agent's worker groups if the agent dies without stopping them.

Started by the agent as ``python -I -S watchdog.py AGENT_PID`` in its own session, with a pipe on
stdin. The agent writes one line per worker process group (``"<pgid>\\n"``) and, when it has
stopped them itself, ``"done\\n"``. If stdin reaches end-of-file without ``done`` (the agent died,
even by SIGKILL, so the kernel closed its end) or the agent's pid stops being our parent, every
known group is SIGKILLed. This is the fallback behind the parent-death signal: it also reaches
grandchildren, which the parent-death signal does not. Standard library only.
"""

from __future__ import annotations

import os
import select
import signal
import sys

POLL_SECONDS = 0.25


def kill_groups(pgids: set[int]) -> None:
    """SIGKILL every process group in ``pgids``; groups already gone are skipped."""
    for pgid in pgids:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue


def watch(agent_pid: int, stream: int = 0) -> int:
    """Watch ``stream`` (the agent's pipe) and the parent pid; return an exit code."""
    pgids: set[int] = set()
    pending = b""
    while True:
        ready, _, _ = select.select([stream], [], [], POLL_SECONDS)
        if not ready:
            if os.getppid() != agent_pid:
                kill_groups(pgids)
                return 1
            continue
        chunk = os.read(stream, 4096)
        if not chunk:
            kill_groups(pgids)
            return 1
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            text = line.decode("ascii", "replace").strip()
            if text == "done":
                return 0
            if text.isdigit():
                pgids.add(int(text))
            elif text.startswith("-") and text[1:].isdigit():
                pgids.discard(int(text[1:]))


if __name__ == "__main__":
    # A terminal's Ctrl-C or hangup is for the agent; the watchdog must outlive it to clean up.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # os._exit: nothing to flush or finalize, and the agent waits for this exit when it stops
    # its workers, so the interpreter's teardown would only add to every job's end.
    os._exit(watch(int(sys.argv[1])))
