"""Steps every 20 ms, except ``--slow-rank``, which takes 200 ms a step (a straggler)."""

from __future__ import annotations

import argparse
import os
import time

from tpelastic.timer import progress

parser = argparse.ArgumentParser()
parser.add_argument("--slow-rank", type=int, default=2)
parser.add_argument("--steps", type=int, default=25)
args = parser.parse_args()
pause = 0.2 if int(os.environ["RANK"]) == args.slow_rank else 0.02
for _ in range(args.steps):
    progress.step()
    time.sleep(pause)
