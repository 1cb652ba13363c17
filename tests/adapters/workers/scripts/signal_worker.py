"""Append the name of every signal received to OUT_DIR/<LOCAL_RANK>; exit on SIGTERM/SIGINT."""

import os
import signal
import sys
import time

path = os.path.join(os.environ["OUT_DIR"], os.environ["LOCAL_RANK"])


def note(signum, _frame):
    with open(path, "a") as out:
        out.write(signal.Signals(signum).name + "\n")
    if signum in (signal.SIGTERM, signal.SIGINT):
        sys.exit(0)


for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, note)
with open(path, "a") as out:
    out.write("ready\n")
time.sleep(60)
