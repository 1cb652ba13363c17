"""Watchdog: kills the agent's worker groups if the agent dies without stopping them.

Started by the agent (``command``) in its own session, with a pipe on stdin: as a short bash
script (``BASH_WATCHDOG``) where ``/bin/bash`` and ``/proc`` are there, about 1 ms of CPU, else
(or with ``TPELASTIC_WATCHDOG=python``) as ``python -I -S watchdog.py AGENT_PID``, 8-10 ms of
CPU taken from the workers while they start (issue 5). Both behave the same. The agent
writes one line per worker process group (``"<pgid>\\n"``) and, when it has
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

_BASH = "/bin/bash"
_PROC_STAT = "/proc/self/stat"

# $1: the agent's pid. ``read -t 0.25`` polls as ``watch`` below does (POLL_SECONDS); a
# timed-out read keeps what it got of a line (``pending``) for the next one. The parent pid is
# field 4 of /proc/$$/stat (bash's ``$PPID`` is fixed at its start). Builtins only: nothing is
# forked while it watches.
BASH_WATCHDOG = r"""
trap '' INT HUP
agent=$1 groups=' ' pending=''
die() {
  for g in $groups; do kill -KILL -- "-$g" 2>/dev/null; done
  exit 1
}
while :; do
  if IFS= read -r -t 0.25 part; then
    line=$pending$part pending=''
    line=${line//[[:space:]]/}
    case $line in
      done) exit 0 ;;
      ''|-|*[!0-9-]*|?*-*) ;;
      -*) groups=${groups// ${line#-} / } ;;
      *) groups+="$line " ;;
    esac
  elif (( $? > 128 )); then
    pending+=$part
    read -r _ _ _ ppid _ < /proc/$$/stat
    [[ $ppid == "$agent" ]] || die
  else
    die
  fi
done
"""


def command(agent_pid: int) -> list[str]:
    """The argv that starts a watchdog for the agent ``agent_pid`` (bash where it can be).

    ``bash -p``: no ``BASH_ENV`` or exported functions from the agent's environment run in it.
    ``$0`` names it ``tpelastic-watchdog`` in process listings.
    """
    usable = os.environ.get("TPELASTIC_WATCHDOG") != "python"
    if usable and os.access(_BASH, os.X_OK) and os.path.exists(_PROC_STAT):
        return [_BASH, "-p", "-c", BASH_WATCHDOG, "tpelastic-watchdog", str(agent_pid)]
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), str(agent_pid)]


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
