"""A gloo worker for the stuck-rank tests: a few steps with an all_reduce each, then
``--sleep-rank`` sleeps (never reaching the next all_reduce) while the others enter it.
No tpelastic call besides progress.step(): the collective hook is the agent's doing."""

from __future__ import annotations

import argparse
import os
import time

import tensorplay as tp
import tensorplay.distributed as dist

from tpelastic.timer import progress


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sleep-rank", type=int, default=1)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])
    value = tp.ones(1)
    for _ in range(3):
        dist.all_reduce(value)
        progress.step()
        time.sleep(0.05)
    if rank == args.sleep_rank:
        time.sleep(600)  # the hung rank: never reaches the all_reduce below
    dist.all_reduce(value)


if __name__ == "__main__":
    main()
