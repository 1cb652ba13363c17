"""Where the time of a standalone 2-worker no-op ``tpelastic run`` goes, phase by phase.

Each trial runs a child process that launches the job in-process (the same code path as
``python -m tpelastic.run --standalone --nproc-per-node 2 noop.py``) with timestamps taken at
the borders of the launch's phases; the parent adds the interpreter's start and exit. Medians
over the trials, with the load average, and two bare interpreters in parallel for reference.

    python bench/launch_phases.py --trials 15
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

PY = sys.executable
PHASES = (
    ("interpreter start", "spawned", "main"),
    ("imports (cli, launcher, agent, core)", "main", "imported"),
    ("rendezvous handler (imports its modules)", "imported", "handler"),
    ("join + agent steps", "handler", "start_processes"),
    ("start workers (fork/exec, watchdog)", "start_processes", "started"),
    ("workers run (bare would too)", "started", "ended"),
    ("stop, exit barrier, close", "ended", "returned"),
    ("interpreter exit", "returned", "exited"),
)

CHILD = """
import json, sys, time
marks = {"main": time.time()}
import tpelastic.cli.run as cli
import tpelastic.adapters.launcher.launch as launch
import tpelastic.adapters.agent.local as local
from tpelastic.adapters.workers.context import PContext
marks["imported"] = time.time()

def stamp(name, fn, when="after"):
    def wrapped(*args, **kwargs):
        if when == "before":
            marks.setdefault(name, time.time())
        out = fn(*args, **kwargs)
        if when == "after":
            marks.setdefault(name, time.time())
        return out
    return wrapped

launch.create_rendezvous_handler = stamp("handler", launch.create_rendezvous_handler)
local.start_processes = stamp("started", stamp("start_processes", local.start_processes, "before"))
_wait = PContext.wait
def wait(self, *args, **kwargs):
    out = _wait(self, *args, **kwargs)
    if out is not None:
        marks.setdefault("ended", time.time())
    return out
PContext.wait = wait
code = cli.main(sys.argv[1:])
marks["returned"] = time.time()
print("MARKS " + json.dumps(marks), flush=True)
from tpelastic.cli.main import finish
sys.exit(finish(code))
"""


def env() -> dict[str, str]:
    out = {**os.environ, "TPELASTIC_LOG_LEVEL": "WARNING", "OMP_NUM_THREADS": "1"}
    out.pop("PYTHONDONTWRITEBYTECODE", None)  # measure with cached bytecode, as installed
    return out


def trial(noop: str) -> dict[str, float]:
    argv = ["--standalone", "--nproc-per-node", "2", noop]
    spawned = time.time()
    done = subprocess.run(
        [PY, "-c", CHILD, *argv], capture_output=True, text=True, env=env(), timeout=60
    )
    exited = time.time()
    line = [x for x in done.stdout.splitlines() if x.startswith("MARKS ")]
    if done.returncode != 0 or not line:
        raise SystemExit(f"trial failed ({done.returncode}): {done.stderr[-2000:]}")
    return {"spawned": spawned, **json.loads(line[0][6:]), "exited": exited}


def bare(noop: str) -> float:
    started = time.time()
    procs = [subprocess.Popen([PY, noop], env=env(), start_new_session=True) for _ in range(2)]
    for proc in procs:
        proc.wait(timeout=60)
    return time.time() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        noop = os.path.join(folder, "noop.py")
        with open(noop, "w") as out:
            out.write("pass\n")
        trial(noop)  # warm-up: bytecode caches
        trials, bares = [], []
        for _ in range(args.trials):
            trials.append(trial(noop))
            bares.append(bare(noop))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{args.trials} trials, load average after: {load}")
    print("| phase | median ms |\n|---|---|")
    for name, start, end in PHASES:
        print(f"| {name} | {statistics.median(t[end] - t[start] for t in trials) * 1000:.0f} |")
    total = statistics.median(t["exited"] - t["spawned"] for t in trials)
    reference = statistics.median(bares)
    print(f"| **total** | **{total * 1000:.0f}** |")
    print(f"| two bare interpreters in parallel | {reference * 1000:.0f} |")
    print(f"| overhead (total - bare) | {(total - reference) * 1000:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
