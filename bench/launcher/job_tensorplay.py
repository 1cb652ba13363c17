"""Benchmark job: print START, form a tensorplay gloo group, all_reduce, print READY.

With BENCH_KILL=1, rank 1 of the first attempt prints KILL and SIGKILLs itself once READY.
"""

import os
import signal
import time

print(f"START {time.time():.6f} restart {os.environ.get('TORCHELASTIC_RESTART_COUNT')}", flush=True)
if os.environ.get("BENCH_NOOP") != "1":
    import tensorplay as tp
    import tensorplay.distributed as dist

    dist.init_process_group("gloo")
    value = tp.tensor([1.0])
    dist.all_reduce(value)
    print(f"READY {time.time():.6f} sum {value.item()}", flush=True)
    first = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    if os.environ.get("BENCH_KILL") == "1" and first and dist.get_rank() == 1:
        time.sleep(0.2)
        print(f"KILL {time.time():.6f}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("BENCH_KILL") == "1" and first:
        time.sleep(30)  # rank 0 waits to be stopped by its launcher
    dist.destroy_process_group()
