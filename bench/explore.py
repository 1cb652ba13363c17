"""Exhaustive exploration of 3 nodes, one fault at a time: states, seconds, and what it found.

    python bench/explore.py            # the CI bounds (tests/sim/test_sim_explore.py, S5)
    python bench/explore.py --slow     # more time per fault, and combined faults
    python bench/explore.py --only crash --only "store pause"

Each row is one `explore_liveness` run after the fixed formation of round 0: every interleaving
keeps the safety invariants, and the run can end from every reachable state (specs/simulation.md,
S5 and S6). Exit code 1 when any run found a violation or a stall (it is printed, replayable).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from tpelastic.core.sim.explore import FAULT_BOUNDS, SLOW_FAULT_BOUNDS, formed_prefix
from tpelastic.core.sim.explore_liveness import explore_liveness


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slow", action="store_true", help="the bigger bounds")
    parser.add_argument("--only", action="append", default=[], metavar="FAULT")
    args = parser.parse_args(argv)
    table = SLOW_FAULT_BOUNDS if args.slow else FAULT_BOUNDS
    unknown = [name for name in args.only if name not in table]
    if unknown:
        parser.error(f"unknown fault {unknown[0]!r}; known: {', '.join(sorted(table))}")
    load = os.getloadavg()[0]
    print(f"load average {load:.2f} on {os.cpu_count()} cores")
    print("| bounds | states | seconds (wall) | seconds (CPU) | found |\n|---|---|---|---|---|")
    bad = 0
    for name in args.only or sorted(table):
        bounds = table[name]
        started, cpu = time.perf_counter(), time.process_time()
        found = explore_liveness(bounds, prefix=formed_prefix(bounds))
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        verdict = "nothing" if found.stall is None else f"{found.stall.invariant}"
        if not found.complete and found.stall is None:
            verdict = "cut short (max_states)"
        row = f"| {name}, {bounds.ticks} ticks | {found.states:,} | {seconds:.1f} | {cpu:.1f} |"
        print(f"{row} {verdict} |", flush=True)
        if found.stall is not None:
            bad += 1
            print(f"    {found.stall.detail}\n    events: {found.stall.events}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
