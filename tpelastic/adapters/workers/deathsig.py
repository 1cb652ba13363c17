"""The command prefix that gives a worker the parent-death signal before it runs.

Between the agent's fork and the worker's exec, something must ask Linux to SIGKILL the worker
when the agent dies, then check that the agent did not die before that request took effect.
Two ways, same behaviour, the first one preferred:

* ``setpriv --pdeathsig KILL -- /bin/sh -c CHECK AGENT_PID COMMAND...`` (util-linux >= 2.33):
  setpriv arms the signal and execs ``sh``, which exits 1 unless its parent is still the agent
  and otherwise execs COMMAND. Two small C programs: about 1 ms before the worker starts.
  Whether setpriv works is probed once per process by running this very prefix on ``true``;
  :func:`start_probe` starts that probe early so that it runs while the agent gets ready.
* ``python -I -S shim.py AGENT_PID -- COMMAND...`` (see ``shim.py``) where setpriv is missing or
  too old: a second interpreter start, 10-15 ms per worker.

Either way the worker keeps the prefix's pid (every step execs), so its pid, process group and
session are the ones the agent started. No Python runs in the agent's child before exec.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim.py")
# ``$0`` is the agent's pid; ``$PPID`` is the shell's parent when it started, i.e. after
# setpriv armed the signal. A different parent means the agent is already gone.
SH_CHECK = '[ "$PPID" = "$0" ] || exit 1; exec "$@"'
# The same, first moving itself into the worker group's cgroup (``$1``, its cgroup.procs): a
# worker that cannot be moved runs anyway, covered by the subreaper alone.
SH_CHECK_CGROUP = '[ "$PPID" = "$0" ] || exit 1; { echo $$ > "$1"; } 2>/dev/null; shift; exec "$@"'
_SH = "/bin/sh"
_PROBE_TIMEOUT = 5.0

_lock = threading.Lock()
# False: not probed yet; a (path, Popen) pair: probing; a path: usable; None: not usable.
_setpriv: str | None | bool | tuple[str, subprocess.Popen[bytes]] = False


def _find(name: str) -> str | None:
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _spawn_probe() -> tuple[str, subprocess.Popen[bytes]] | None:
    """Start running the prefix on ``true``; None when setpriv or sh is not there at all."""
    if not sys.platform.startswith("linux") or not os.access(_SH, os.X_OK):
        return None
    setpriv = _find("setpriv")
    if setpriv is None:
        return None
    argv = [setpriv, "--pdeathsig", "KILL", "--", _SH, "-c", SH_CHECK, str(os.getpid()), "true"]
    quiet = subprocess.DEVNULL
    try:
        return setpriv, subprocess.Popen(argv, stdin=quiet, stdout=quiet, stderr=quiet)
    except OSError:
        return None


def _probe_result(setpriv: str, probe: subprocess.Popen[bytes]) -> str | None:
    try:
        code = probe.wait(timeout=_PROBE_TIMEOUT)
    except subprocess.TimeoutExpired:
        probe.kill()
        probe.wait()
        return None
    return setpriv if code == 0 else None  # an old setpriv rejects --pdeathsig


def start_probe() -> None:
    """Start the one probe of this process now, if not done yet (never blocks, never raises)."""
    global _setpriv
    with _lock:
        if _setpriv is False:
            _setpriv = _spawn_probe()


def usable_setpriv() -> str | None:
    """The setpriv to use, probed once per process (``TPELASTIC_SHIM=python`` forces the shim).

    Blocks until the probe ends (a few milliseconds; at most 5 s, then the shim is used).
    """
    global _setpriv
    if os.environ.get("TPELASTIC_SHIM") == "python":
        return None
    with _lock:
        if _setpriv is False:
            _setpriv = _spawn_probe()
        if isinstance(_setpriv, tuple):
            _setpriv = _probe_result(*_setpriv)
        return _setpriv if isinstance(_setpriv, str) else None


def prefix(agent_pid: int, cgroup_procs: str | None = None) -> list[str]:
    """The argv to put before a worker's command so that it dies with ``agent_pid`` (and,
    given ``cgroup_procs``, enters that cgroup before its exec)."""
    setpriv = usable_setpriv()
    if setpriv is not None:
        start = [setpriv, "--pdeathsig", "KILL", "--", _SH, "-c"]
        if cgroup_procs is None:
            return [*start, SH_CHECK, str(agent_pid)]
        return [*start, SH_CHECK_CGROUP, str(agent_pid), cgroup_procs]
    extra = [] if cgroup_procs is None else ["--cgroup", cgroup_procs]
    return [sys.executable, "-I", "-S", SHIM, str(agent_pid), *extra, "--"]


__all__ = ["SHIM", "SH_CHECK", "prefix", "start_probe", "usable_setpriv"]
