"""Children that try to escape: one in a new session, one started only on SIGTERM.

Writes "<own pid> <escaped child pid>" to PID_DIR/<LOCAL_RANK>, and on SIGTERM (which it
otherwise ignores) starts another child and writes its pid to PID_DIR/late.
"""

import os
import signal
import subprocess
import sys
import time

SLEEP = [
    sys.executable,
    "-c",
    "import signal, time; signal.signal(15, signal.SIG_IGN); time.sleep(120)",
]
pid_dir = os.environ["PID_DIR"]


def publish(name: str, text: str) -> None:
    with open(os.path.join(pid_dir, f"{name}.tmp"), "w") as out:
        out.write(text)
    os.replace(os.path.join(pid_dir, f"{name}.tmp"), os.path.join(pid_dir, name))


def on_term(_signum, _frame):
    late = subprocess.Popen(SLEEP)
    publish("late", str(late.pid))


signal.signal(signal.SIGTERM, on_term)
escaped = subprocess.Popen(SLEEP, start_new_session=True)
publish(os.environ["LOCAL_RANK"], f"{os.getpid()} {escaped.pid}")
while True:
    time.sleep(1)
