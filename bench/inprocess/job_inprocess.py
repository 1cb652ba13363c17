"""Benchmark job for in-process restart: trains through ``tpelastic.worker.run``.

Every rank all_reduces, prints ``READY <time> restart <n> rank <r> pid <pid>`` once its group
agreed, then keeps all_reducing. While the restart count is below ``BENCH_FAILURES`` the
failing rank (``restart % world``) prints ``FAIL <time> restart <n>`` ``BENCH_FAIL_AFTER`` s
(0.2) after its READY and
raises (``BENCH_MODE=raise``) or SIGKILLs itself (``BENCH_MODE=kill``); its peers' all_reduce
then fails and the world restarts. The last attempt ends after a few steps.
"""

import os
import signal
import time

import tpelastic.worker as elastic

FAILURES = int(os.environ.get("BENCH_FAILURES", "1"))
MODE = os.environ.get("BENCH_MODE", "raise")
# How long the failing rank trains first (a respawn takes a warm interpreter once one is ready).
AFTER = float(os.environ.get("BENCH_FAIL_AFTER", "0.2"))


def train(state: elastic.State) -> None:
    import tensorplay as tp
    import tensorplay.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ["TPELASTIC_RESTART_COUNT"])
    value = tp.tensor([1.0])
    dist.all_reduce(value)
    print(f"READY {time.time():.6f} restart {restart} rank {rank} pid {os.getpid()}", flush=True)
    failing = restart < FAILURES and rank == restart % world
    until = time.monotonic() + (AFTER if failing else 0.3)
    while failing or restart < FAILURES or time.monotonic() < until:
        if failing and time.monotonic() >= until:
            print(f"FAIL {time.time():.6f} restart {restart}", flush=True)
            if MODE == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError("failing on purpose")
        dist.all_reduce(tp.tensor([0.0]))
        time.sleep(0.01)
        state.step += 1
        state.commit()


elastic.run(train, elastic.State(step=0))
