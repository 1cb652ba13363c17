"""``cli.main.finish``: the command's exit keeps what a normal exit shows, without the teardown.

Real interpreters: each case runs in a child process that ends through ``finish``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _end_with(body: str) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(body) + "\nfrom tpelastic.cli.main import finish\nfinish(CODE)\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)


def test_status_buffered_output_and_atexit_handlers_are_kept():
    done = _end_with(
        """
        import atexit, logging, sys
        CODE = 3
        logging.basicConfig(stream=sys.stderr, format="%(message)s")
        atexit.register(lambda: print("atexit ran"))
        sys.stdout.write("x" * 100000)  # still in the buffer: nothing flushed it
        logging.getLogger("t").warning("logged")
        """
    )
    assert done.returncode == 3
    assert done.stdout == "x" * 100000 + "atexit ran\n"
    assert done.stderr == "logged\n"


def test_a_running_non_daemon_thread_is_waited_for():
    done = _end_with(
        """
        import threading, time
        CODE = 5
        def late():
            time.sleep(0.3)
            print("thread done", flush=True)
        threading.Thread(target=late).start()
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # not waited for
        """
    )
    assert done.returncode == 5 and done.stdout == "thread done\n"


def test_a_closed_stdout_does_not_change_the_status():
    done = _end_with(
        """
        import os, sys
        CODE = 0
        print("lost", end="")
        os.close(1)  # the buffered text cannot be written any more
        """
    )
    assert done.returncode == 0


def test_X3_a_thread_stuck_in_a_blocking_call_does_not_hold_the_exit():
    done = _end_with(
        """
        import threading, time
        CODE = 3
        threading.Thread(target=threading.Event().wait, name="stuck").start()  # never ends
        STARTED = time.monotonic()
        import atexit
        atexit.register(lambda: print(f"{time.monotonic() - STARTED:.1f}"))
        """
    )
    assert done.returncode == 3
    assert float(done.stdout) < 2.0, done.stdout  # bounded wait (1 s), not forever
