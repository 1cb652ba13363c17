"""The agent as its workers' child subreaper: no descendant escapes by daemonizing.

A worker's descendant whose parent exits (a double fork, a daemon that called ``setsid``) is
re-parented to the nearest ancestor that is a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``)
instead of to init. With the agent one, such a process stays the agent's child, and every
worker group marks its processes' environment (``MARKER``), so the group's close finds the
adopted ones and stops them with the workers. ``/proc/<pid>/environ`` shows the environment a
process was started with, so the mark shows in a command worker's descendants; a callable's
(multiprocessing) workers set theirs after the start, so for them the agent's children that
were born during the group's life and are none of its own (workers, watchdog, multiprocessing's
helpers) count as adopted. A descendant that clears its environment, or an agent killed with
SIGKILL, is the way out; a per-attempt cgroup would close it.
"""

from __future__ import annotations

import os
import threading

MARKER = "TPELASTIC_WORKER_GROUP"
_PR_SET_CHILD_SUBREAPER = 36
_lock = threading.Lock()
_state: bool | None = None


def become_subreaper() -> bool:
    """Make this process a child subreaper (once); True when it is one."""
    global _state
    with _lock:
        if _state is None:
            _state = _prctl_subreaper()
        return _state


def _prctl_subreaper() -> bool:
    try:
        import ctypes  # only here: the agent's launch path pays for it once

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False  # not Linux, or no prctl: descendants reparent to init as before


def adopted(token: str) -> list[int]:
    """This process's live children that carry worker group ``token`` in their environment:
    the descendants of that group's workers that were re-parented here.

    Read from /proc without psutil: a job whose workers left nothing behind imports nothing.
    """
    wanted = f"{MARKER}={token}".encode()
    found = []
    for pid in children():
        try:
            with open(f"/proc/{pid}/environ", "rb") as src:
                if wanted in src.read().split(b"\0"):
                    found.append(pid)
        except OSError:
            continue  # gone, or not ours to read (a zombie's environment reads empty)
    return found


def children() -> set[int]:
    """The pids of this process's children (from /proc)."""
    me = os.getpid()
    found: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{me}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{me}/task/{task}/children") as src:
                found.update(int(pid) for pid in src.read().split())
        except (OSError, ValueError):
            continue
    return found


def reap(pids: list[int]) -> None:
    """Collect the exit status of ``pids`` (this process's adopted children) if they ended."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue


__all__ = ["MARKER", "adopted", "become_subreaper", "children", "reap"]
