"""A worker that leaves a daemon behind: fork, setsid (unless "keep-session"), fork again; the
grandchild writes its pid to $PID_DIR/daemon<LOCAL_RANK> and sleeps (with "clean-env", as
``sleep`` with an empty environment, so no mark of its group is left on it); the worker then
exits 0 (or with "stay", sleeps too)."""

from __future__ import annotations

import os
import sys
import time


def daemonize(pid_dir: str, name: str, new_session: bool = True, clean_env: bool = False) -> None:
    """Leave a daemon whose pid is written (atomically) to ``pid_dir/name``."""
    if os.fork() == 0:
        if new_session:
            os.setsid()
        if os.fork() == 0:
            tmp = os.path.join(pid_dir, f".{name}")
            with open(tmp, "w") as out:
                out.write(str(os.getpid()))
            os.rename(tmp, os.path.join(pid_dir, name))
            if clean_env:
                os.execve("/bin/sleep", ["sleep", "300"], {})
            time.sleep(300)
        os._exit(0)  # the middle process: its child is an orphan now
    os.wait()


def leave_a_daemon(pid_dir: str, new_session: bool, clean_env: bool = False) -> int:
    """A callable worker (multiprocessing) that leaves a daemon, then returns."""
    daemonize(pid_dir, f"daemon{os.environ['LOCAL_RANK']}", new_session, clean_env)
    return os.getpid()


if __name__ == "__main__":
    daemonize(
        os.environ["PID_DIR"],
        f"daemon{os.environ['LOCAL_RANK']}",
        "keep-session" not in sys.argv,
        "clean-env" in sys.argv,
    )
    if "stay" in sys.argv:
        time.sleep(300)
