"""A worker that ignores SIGTERM (and, with "daemon", first leaves a setsid'd daemon behind);
writes its pids to $OUT/<LOCAL_RANK> when it is ready, then sleeps."""

from __future__ import annotations

import os
import signal
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
pids = [os.getpid()]
if "daemon" in sys.argv and os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(300)
    os._exit(0)
out = os.environ["OUT"]
tmp = os.path.join(out, f".{os.environ['LOCAL_RANK']}")
with open(tmp, "w") as dst:
    dst.write(str(os.getpid()))
os.rename(tmp, os.path.join(out, os.environ["LOCAL_RANK"]))
time.sleep(300)
