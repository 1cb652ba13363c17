"""A stand-in agent with the default signal policy: start 2 workers and wait.

Workers (signal_worker.py) append each signal they get to OUT_DIR/<rank>. On a STOP signal the
agent closes them with that signal and exits 0 after writing OUT_DIR/agent_stopped.
"""

import os
import sys

from tpelastic.multiprocessing import (
    SignalException,
    SignalPolicy,
    install_signal_policy,
    start_processes,
)

HERE = os.path.dirname(os.path.abspath(__file__))

out_dir = sys.argv[1]
envs = {r: {"LOCAL_RANK": str(r), "OUT_DIR": out_dir} for r in range(2)}
ctx = start_processes("sig", sys.executable, (os.path.join(HERE, "signal_worker.py"),), envs)
restore = install_signal_policy(SignalPolicy(), lambda: ctx)
try:
    while ctx.wait(timeout=30, period=0.05) is None:
        pass
except SignalException as exc:
    ctx.close(death_sig=exc.sigval, timeout=5)
    with open(os.path.join(out_dir, "agent_stopped"), "w") as out:
        out.write(exc.sigval.name)
    sys.exit(0)
finally:
    restore()
    ctx.close()
