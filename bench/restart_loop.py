"""Kill-and-restart loop: one worker is SIGKILLed after its all_reduce, N times in a row.

Each attempt must re-form a real gloo process group (fresh MASTER_PORT, clean namespace). The
job succeeds only if all N restarts re-initialised gloo; the script prints how many attempts
formed their group and the mean time per restart.

    python bench/restart_loop.py --loops 50
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "e2e" / "scripts" / "worker.py"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        cmd = [
            sys.executable,
            "-m",
            "tpelastic",
            "run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "--max-restarts",
            str(args.loops),
            str(WORKER),
            "--out",
            out,
            "--crash-until",
            str(args.loops),
        ]
        env = {**os.environ, "PYTHONPATH": str(REPO), "TPELASTIC_LOG_LEVEL": "WARNING"}
        started = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60 * 30)
        took = time.monotonic() - started
        formed = len(list(Path(out).glob("r*_rank*_pid*.json"))) // 2
    ok = done.returncode == 0 and formed == args.loops + 1
    print(
        f"restarts: {args.loops}, attempts whose gloo group formed: {formed}/{args.loops + 1}, "
        f"exit code {done.returncode}, {took:.1f} s total, "
        f"{took / (args.loops + 1):.2f} s per attempt"
    )
    if not ok:
        print(done.stderr[-4000:], file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
