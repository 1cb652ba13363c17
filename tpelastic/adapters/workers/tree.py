"""Stopping whole process trees: a worker, its wrapper scripts and everything they started.

Every worker is the leader of its own session and process group (its pgid is its pid), so a
process that lost its parent is still found through the group. A stop sends the chosen signal to
every process found, waits up to the grace period, then looks again (new children may have been
started meanwhile) and SIGKILLs whatever is left.
"""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Iterable
from typing import TYPE_CHECKING

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock

if TYPE_CHECKING:
    import psutil


def _group_members(pgids: set[int]) -> list[psutil.Process]:
    """Processes whose process group is one of ``pgids`` (found by scanning, since the leader
    may already be gone and its children reparented)."""
    if not pgids:
        return []
    import psutil

    found = []
    # Bare pids and one getpgid call each: a psutil.Process (which reads /proc/<pid>/stat) is
    # made only for the few members, which matters on a machine with thousands of processes.
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) in pgids:
                found.append(psutil.Process(pid))
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def collect_tree(root_pids: Iterable[int], pgids: Iterable[int] = ()) -> list[psutil.Process]:
    """Every live process in the trees under ``root_pids`` plus the members of ``pgids``.

    The agent's own process is never included, even if it shares a group. Processes that vanish
    while we look are skipped.
    """
    import psutil  # imported when a tree must really be looked at (see kill_trees)

    seen: dict[int, psutil.Process] = {}
    for pid in root_pids:
        try:
            root = psutil.Process(pid)
            for proc in [root, *root.children(recursive=True)]:
                seen.setdefault(proc.pid, proc)
        except psutil.Error:
            continue
    for proc in _group_members(set(pgids)):
        seen.setdefault(proc.pid, proc)
        try:
            for child in proc.children(recursive=True):
                seen.setdefault(child.pid, child)
        except psutil.Error:
            continue
    seen.pop(os.getpid(), None)
    return list(seen.values())


def _signal_all(procs: Iterable[psutil.Process], sig: int) -> None:
    import psutil

    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            continue


def _alive(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    import psutil

    alive = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.Error:
            continue
    return alive


def _group_exists(pgid: int) -> bool:
    """Whether any process (zombies included) is still in process group ``pgid``.

    Signal 0 checks without sending anything, so the usual clean end of a job costs no scan of
    every process on the machine (and no psutil import).
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process reuses the id: let the scan decide
    return True


def _wait_exits(procs: Iterable[psutil.Process], deadline: float, clock: Clock) -> None:
    """Block until each of ``procs`` has exited (zombies count) or ``deadline`` passes.

    With pidfds (Linux 5.3+) the exits wake us as they happen, so a worker that obeys SIGTERM
    at once is seen at once (a restart waits for this). Where pidfds are missing this returns
    at once and the caller's polling loop does the waiting.
    """
    poller, fds = select.poll(), []
    try:
        for proc in procs:
            try:
                fds.append(os.pidfd_open(proc.pid))
            except ProcessLookupError:
                continue  # already gone
            poller.register(fds[-1], select.POLLIN)
        pending = set(fds)
        while pending and (left := deadline - clock.now()) > 0:
            for fd, _mask in poller.poll(left * 1000.0):
                pending.discard(fd)
                poller.unregister(fd)
    except (AttributeError, OSError):
        return  # no pidfds here: the caller polls
    finally:
        for fd in fds:
            os.close(fd)


def kill_trees(
    root_pids: Iterable[int],
    pgids: Iterable[int] = (),
    death_sig: int = signal.SIGTERM,
    timeout: float = 30.0,
    *,
    clock: Clock = SYSTEM_CLOCK,
) -> list[int]:
    """Stop every process under ``root_pids`` and in ``pgids``; returns the pids SIGKILLed.

    Args:
        root_pids: the workers (or any processes) whose trees to stop.
        pgids: process groups whose members are stopped too.
        death_sig: the polite signal sent first.
        timeout: seconds to wait after ``death_sig`` before SIGKILL; 0 goes straight to SIGKILL.
        clock: times the waits.

    Never raises for processes that are already gone. Zombies (exited, not yet reaped by their
    parent) count as stopped; the caller reaps its own children.
    """
    roots, groups = list(root_pids), [g for g in pgids if _group_exists(g)]
    if not roots and not groups:
        return []  # the usual end of a job: every worker exited and left nothing behind
    procs = collect_tree(roots, groups)
    if timeout > 0 and death_sig != signal.SIGKILL:
        _signal_all(procs, death_sig)
        deadline = clock.deadline(timeout)
        _wait_exits(procs, deadline, clock)
        while _alive(procs) and clock.now() < deadline:
            clock.sleep(0.02)
    # Look again: children started during the grace period must not escape.
    left = _alive({p.pid: p for p in [*procs, *collect_tree(roots, groups)]}.values())
    _signal_all(left, signal.SIGKILL)
    deadline = clock.deadline(5.0)
    _wait_exits(left, deadline, clock)
    while _alive(left) and clock.now() < deadline:
        clock.sleep(0.01)
    return [p.pid for p in left]


__all__ = ["collect_tree", "kill_trees"]
