"""A cgroup v2 per worker group, where the agent may make one: nothing a worker starts escapes.

The subreaper (``subreaper.py``) keeps a worker's daemon the agent's child, but finds it by the
group's mark in its environment; a descendant that clears its environment is not found. A
cgroup holds every descendant whatever it does (double fork, ``setsid``, a cleared environment,
a new process group), and ``cgroup.kill`` (Linux 5.14+) kills them all at once. Each worker puts
itself in the group's cgroup before it runs any of the user's code: the command prefix writes
its pid to ``cgroup.procs`` before its exec, a callable's worker first thing in the child.

Where no cgroup v2 hierarchy is mounted, or the agent's own cgroup is not writable (not root,
a delegated subtree elsewhere), or the kernel has no ``cgroup.kill``, the group has no cgroup and
the subreaper alone stops what it finds. The cgroup is removed when the group closes; an agent
killed with SIGKILL leaves an empty one (its workers die with it by the parent-death signal),
removed by the next agent that makes one there.
"""

from __future__ import annotations

import os

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock

PREFIX = "tpelastic-"


def own_cgroup_dir(
    mountinfo: str = "/proc/self/mountinfo", cgroup: str = "/proc/self/cgroup"
) -> str | None:
    """The folder of this process's cgroup in the v2 hierarchy, or None when there is none."""
    try:
        with open(cgroup, encoding="ascii") as src:
            lines = src.read().splitlines()
        with open(mountinfo, encoding="ascii") as src:
            mounts = src.read().splitlines()
    except OSError:
        return None
    path = next((line[3:] for line in lines if line.startswith("0::")), None)
    if path is None:
        return None
    for mount in mounts:
        left, _, right = mount.partition(" - ")
        if right.split(" ")[0] == "cgroup2":
            fields = left.split(" ")
            root, point = fields[3], fields[4]
            if path == root or path.startswith(root.rstrip("/") + "/"):
                inside = path[len(root) :].lstrip("/")
                return os.path.join(point, inside) if inside else point
    return None


class WorkerCgroup:
    """One worker group's cgroup: where its workers are put, and how they are all killed."""

    def __init__(self, path: str, clock: Clock = SYSTEM_CLOCK) -> None:
        self.path = path
        self.procs = os.path.join(path, "cgroup.procs")
        self._clock = clock

    @classmethod
    def create(cls, token: str, clock: Clock = SYSTEM_CLOCK) -> WorkerCgroup | None:
        """A new cgroup named after the group's ``token`` under this process's own, or None
        where one cannot be made (see the module's docstring)."""
        base = own_cgroup_dir()
        if base is None:
            return None
        _remove_orphans(base)
        path = os.path.join(base, PREFIX + token)
        try:
            os.mkdir(path)
        except OSError:
            return None
        if not os.path.exists(os.path.join(path, "cgroup.kill")):
            _rmdir(path)
            return None
        return cls(path, clock)

    def pids(self) -> list[int]:
        """The processes in the cgroup now (exited ones have left it)."""
        try:
            with open(self.procs, encoding="ascii") as src:
                return [int(pid) for pid in src.read().split()]
        except (OSError, ValueError):
            return []

    def kill_all(self, timeout: float = 5.0) -> bool:
        """SIGKILL every process in the cgroup and wait up to ``timeout`` s until it is empty;
        True when it is."""
        try:
            with open(os.path.join(self.path, "cgroup.kill"), "w", encoding="ascii") as dst:
                dst.write("1")
        except OSError:
            return False
        deadline = self._clock.deadline(timeout)
        while self._populated():
            if self._clock.now() >= deadline:
                return False
            self._clock.sleep(0.01)
        return True

    def _populated(self) -> bool:
        try:
            with open(os.path.join(self.path, "cgroup.events"), encoding="ascii") as src:
                return "populated 1" in src.read()
        except OSError:
            return False

    def remove(self) -> None:
        """Remove the (empty) cgroup and the empty ones under it (a nested agent's that was
        killed before it could remove its own); one that still holds a process stays."""
        for folder, dirs, _files in os.walk(self.path, topdown=False):
            for name in dirs:
                _rmdir(os.path.join(folder, name))
        _rmdir(self.path)


def _remove_orphans(base: str) -> None:
    """Remove the empty cgroups of agents that are gone (killed before they could)."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        pid = name[len(PREFIX) :].split("-", 1)[0]
        if name.startswith(PREFIX) and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            WorkerCgroup(os.path.join(base, name)).remove()  # a populated one stays


def _rmdir(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass


__all__ = ["PREFIX", "WorkerCgroup", "own_cgroup_dir"]
