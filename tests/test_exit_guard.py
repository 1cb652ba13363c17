"""ExitGuard (specs/exit.md X3): once armed, a stuck process still ends with the outcome's code;
disarmed in time, it changes nothing. Real interpreters in child processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time


def _run(body: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(body)], capture_output=True, text=True, timeout=60
    )
    return done, time.monotonic() - started


def test_X3_an_armed_guard_ends_a_process_stuck_in_the_main_thread():
    done, spent = _run(
        """
        import threading
        from tpelastic.adapters.launcher.exit_guard import ExitGuard
        ExitGuard(budget=0.5).arm(3)
        print("outcome", flush=True)
        threading.Event().wait()  # a call that never returns
        """
    )
    assert done.returncode == 3 and done.stdout == "outcome\n"
    assert "exiting now" in done.stderr or done.stderr == ""  # logging may be unconfigured
    assert spent < 10.0  # not the 60 s timeout: the guard ended it


def test_X3_a_disarmed_guard_changes_nothing():
    done, _ = _run(
        """
        import time
        from tpelastic.adapters.launcher.exit_guard import ExitGuard
        guard = ExitGuard(budget=0.3)
        guard.arm(3)
        guard.arm(4)  # the first code stands
        guard.disarm()
        time.sleep(0.8)
        print("still here", flush=True)
        """
    )
    assert done.returncode == 0 and done.stdout == "still here\n"
