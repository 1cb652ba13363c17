"""Start a grandchild (sleeping), record both pids in PID_DIR, then sleep.

tree.py [ignore-term]: with ignore-term both this process and the grandchild ignore SIGTERM.
"""

import os
import signal
import subprocess
import sys
import time

ignore = "ignore-term" in sys.argv[1:]
if ignore:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
code = "import signal,time\n"
if ignore:
    code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
code += "time.sleep(120)\n"
child = subprocess.Popen([sys.executable, "-c", code])
rank = os.environ["LOCAL_RANK"]
tmp = os.path.join(os.environ["PID_DIR"], f"{rank}.tmp")
with open(tmp, "w") as out:
    out.write(f"{os.getpid()} {child.pid}")
os.replace(tmp, os.path.join(os.environ["PID_DIR"], rank))
time.sleep(120)
