"""A worker for the observability tests (no tensorplay: it starts fast).

It steps the progress heartbeat, then does what its flags say (``--*-rank`` are global ranks)
on the first attempt (restart count 0): crash, overrun a timer, or stop stepping. Later
attempts step a few times and exit 0. ``--hold-until PATH`` keeps every worker stepping until
PATH exists.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from tpelastic.timer import expires, progress


def hold(path: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not os.path.exists(path) and time.monotonic() < deadline:
        progress.step()
        time.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--crash-rank", type=int, default=-1)
    parser.add_argument("--timer-rank", type=int, default=-1)
    parser.add_argument("--stall-rank", type=int, default=-1)
    parser.add_argument("--every-attempt", action="store_true")
    parser.add_argument("--start-delay", type=float, default=0.0)  # before the first step
    parser.add_argument("--hold-until", default="")
    args = parser.parse_args()
    rank = int(os.environ["RANK"])  # the global rank: the same as the local one on one node
    first = int(os.environ["TPELASTIC_RESTART_COUNT"]) == 0 or args.every_attempt
    time.sleep(args.start_delay)
    for _ in range(3):
        progress.step()
        time.sleep(0.02)
    if first and rank == args.crash_rank:
        print(f"rank {rank} crashes on purpose", file=sys.stderr, flush=True)
        return 1
    if first and rank == args.timer_rank:
        with expires(after=1, scope="slow-step"):
            time.sleep(30)
    if first and rank == args.stall_rank:
        time.sleep(60)  # stops stepping: the agent must call this rank stuck
    if args.hold_until:
        hold(args.hold_until)
    print(f"rank {rank} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
