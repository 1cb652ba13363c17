"""Where the time of a 2-worker no-op ``tpelastic run`` goes, phase by phase, standalone and c10d.

Each trial runs a child process that launches the job in-process (the same code path as
``python -m tpelastic.run --standalone --nproc-per-node 2 noop.py``, or with ``--nnodes 1
--rdzv-backend c10d --rdzv-endpoint 127.0.0.1:<free port>`` for the multi-node path) with
timestamps taken at the borders of the launch's phases; the parent adds the interpreter's start
and exit. The backends run round-robin, one column each; medians over the trials, with the load
average, and two bare interpreters in parallel for reference.

    python bench/launch_phases.py --trials 15
    python bench/launch_phases.py --trials 15 --backends c10d,tcp,file

``--imports`` adds the agent's import time by package (``python -X importtime``, self times,
median over the trials; importtime's own bookkeeping inflates them by 20-40 %).

``--first-line`` instead times, round-robin, how long after the spawn two workers run their
first line: started bare, behind a Python parent that only spawns them, one that first imports
attrs, one that first steps tpelastic's agent machine to StartWorkers (the least issue 5 allows
before a worker starts), and behind ``tpelastic run --standalone``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

PY = sys.executable
PHASES = (
    ("interpreter start", "spawned", "main"),
    ("imports (cli, launcher, agent, core)", "main", "imported"),
    ("rendezvous handler (its imports; c10d: hosts the store)", "imported", "handler"),
    ("join: to the round's info", "handler", "joined"),
    ("  of it: bootstrap store started (c10d)", "serving", "served"),
    ("agent steps to the start", "joined", "start_processes"),
    ("start workers (fork/exec, watchdog)", "start_processes", "started"),
    ("workers run (bare would too)", "started", "ended"),
    ("stop, exit barrier, close", "ended", "returned"),
    ("interpreter exit", "returned", "exited"),
)
BACKENDS = ("standalone", "c10d")

CHILD = """
import gc, json, sys, time
marks = {"main": time.time()}
gc.disable()  # as the entry points do (tpelastic/run.py); cli.run turns it back on
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
from tpelastic.adapters.rendezvous.dynamic import DynamicRendezvousHandler as Dynamic
Dynamic.next_rendezvous = stamp("joined", Dynamic.next_rendezvous)
from tpelastic.adapters.rendezvous.bootstrap import BootstrapHost
BootstrapHost.serve = stamp("served", stamp("serving", BootstrapHost.serve, "before"))
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
import resource
usage = resource.getrusage(resource.RUSAGE_SELF)
marks["cpu"] = usage.ru_utime + usage.ru_stime  # the agent only: its workers are children
print("MARKS " + json.dumps(marks), flush=True)
from tpelastic.cli.main import finish
sys.exit(finish(code))
"""


def env() -> dict[str, str]:
    out = {**os.environ, "TPELASTIC_LOG_LEVEL": "WARNING", "OMP_NUM_THREADS": "1"}
    out.pop("PYTHONDONTWRITEBYTECODE", None)  # measure with cached bytecode, as installed
    return out


def one_node(backend: str) -> list[str]:
    """``--standalone``, or the multi-node path on one node: ``backend`` on a free loopback port
    (the agent hosts the rendezvous store and the workers' bootstrap store)."""
    if backend == "standalone":
        return ["--standalone"]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return ["--nnodes", "1", "--rdzv-backend", backend, "--rdzv-endpoint", f"127.0.0.1:{port}"]


def trial(noop: str, backend: str = "standalone") -> dict[str, float]:
    argv = [*one_node(backend), "--nproc-per-node", "2", noop]
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


_GROUPS = (
    ("tpelastic.core.", "tpelastic.core (pure machines, attrs classes)"),
    ("tpelastic.adapters.agent", "tpelastic.adapters.agent"),
    ("tpelastic.adapters.rendezvous", "tpelastic.adapters.rendezvous"),
    ("tpelastic.adapters.workers", "tpelastic.adapters.workers"),
    ("tpelastic.", "tpelastic, other"),
    ("attr", "attrs"),
)


def _group(module: str) -> str:
    for prefix, name in _GROUPS:
        if module.startswith(prefix) or module == prefix.rstrip("."):
            return name
    return "standard library and the rest"


def import_groups(noop: str, trials: int, backend: str = "standalone") -> dict[str, float]:
    """Median self time (ms) of the agent's imports by group, interpreter start excluded."""
    base = _self_times(subprocess.run([PY, "-X", "importtime", "-c", "pass"], **_quiet()).stderr)
    runs = []
    for _ in range(trials):
        argv = [PY, "-X", "importtime", "-m", "tpelastic.run", *one_node(backend)]
        argv += ["--nproc-per-node", "2", noop]
        times = _self_times(subprocess.run(argv, **_quiet()).stderr)
        totals: dict[str, float] = {}
        for module, micros in times.items():
            if module not in base:
                key = _group(module)
                totals[key] = totals.get(key, 0.0) + micros / 1000
        runs.append(totals)
    keys = sorted({k for run in runs for k in run})
    return {k: statistics.median(run.get(k, 0.0) for run in runs) for k in keys}


def _quiet() -> dict[str, object]:
    return {"capture_output": True, "text": True, "env": env(), "timeout": 60}


def _self_times(stderr: str) -> dict[str, int]:
    found = re.findall(r"^import time:\s*(\d+) \|\s*\d+ \|\s*(\S+)", stderr, re.MULTILINE)
    return {name: int(micros) for micros, name in found}


# A worker that prints when its first line runs; and parents that start two of them after doing
# less and less of what tpelastic does before its first worker (``--first-line``).
FIRST = "import os, time; os.write(1, f'FIRST {time.time()!r}\\n'.encode())\n"  # one write
PARENTS = {
    "python parent, spawn only": "",
    "+ import attrs": "import attrs",
    "+ the agent machine stepped to StartWorkers": """
import time
from tpelastic.core import agent as core
config = core.AgentConfig(max_restarts=0, min_nodes=1, max_nodes=1, local_world_size=2)
step = core.step(core.initial_state(config), core.AgentStarted(now=time.monotonic()), config)
done = core.RoundCompleted(
    now=time.monotonic(), round=0, group_rank=0, group_world_size=1, restart_count=0
)
assert any(isinstance(e, core.StartWorkers) for e in core.step(step.state, done, config).effects)
""",
}
SPAWN = """
import subprocess, sys
workers = [subprocess.Popen([sys.executable, sys.argv[1]], start_new_session=True) for _ in "ab"]
sys.exit(max(w.wait() for w in workers))
"""


def first_lines(script: str, trials: int) -> dict[str, float]:
    """Median time (s) from the spawn to the later of two workers' first lines, per starter."""
    starters = {
        "bare (two workers spawned directly)": None,
        **{name: [PY, "-c", setup + SPAWN, script] for name, setup in PARENTS.items()},
        "tpelastic run --standalone": [
            *(PY, "-m", "tpelastic.run", "--standalone", "--nproc-per-node", "2", script)
        ],
    }
    runs: dict[str, list[float]] = {name: [] for name in starters}
    for _ in range(trials):
        for name, argv in starters.items():
            spawned = time.time()
            if argv is None:
                procs = [
                    subprocess.Popen([PY, script], stdout=subprocess.PIPE, text=True, env=env())
                    for _ in range(2)
                ]
                text = "".join(proc.communicate(timeout=60)[0] for proc in procs)
            else:
                text = subprocess.run(argv, **_quiet()).stdout  # type: ignore[call-overload]
            lines = re.findall(r"^FIRST (\S+)", text, re.MULTILINE)
            if len(lines) != 2:
                raise SystemExit(f"{name}: expected two FIRST lines, got {text[-500:]!r}")
            runs[name].append(max(float(x) for x in lines) - spawned)
    return {name: statistics.median(values) for name, values in runs.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=15)
    parser.add_argument("--imports", action="store_true", help="also the imports by package")
    parser.add_argument(
        "--backends", default=",".join(BACKENDS), help="standalone and/or c10d, tcp, ...: columns"
    )
    parser.add_argument(
        "--first-line",
        action="store_true",
        help="only: time to the workers' first lines, bare, behind minimal parents, tpelastic",
    )
    args = parser.parse_args()
    if args.first_line:
        return print_first_lines(args.trials)
    backends = [b.strip() for b in args.backends.split(",")]
    print(f"load average before: {load()}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        noop = os.path.join(folder, "noop.py")
        with open(noop, "w") as out:
            out.write("pass\n")
        for backend in backends:
            trial(noop, backend)  # warm-up: bytecode caches
        trials: dict[str, list[dict[str, float]]] = {b: [] for b in backends}
        bares, loads = [], []
        for _ in range(args.trials):  # round-robin: a change of load hits every column alike
            loads.append(os.getloadavg()[0])
            for backend in backends:
                trials[backend].append(trial(noop, backend))
            bares.append(bare(noop))
        groups = {b: import_groups(noop, args.trials, b) for b in backends} if args.imports else {}
    print(
        f"{args.trials} rounds, 1-min load over them: median {statistics.median(loads):.2f}, "
        f"{min(loads):.2f}-{max(loads):.2f}; load average after: {load()}"
    )
    print(f"| phase, median ms | {' | '.join(backends)} |")
    print(f"|---|{'---|' * len(backends)}")

    def row(name: str, values: list[float | None]) -> None:
        cells = ["-" if v is None else f"{v * 1000:.0f}" for v in values]
        print(f"| {name} | {' | '.join(cells)} |")

    def phase(runs: list[dict[str, float]], start: str, end: str) -> float | None:
        spans = [t[end] - t[start] for t in runs if start in t and end in t]
        return statistics.median(spans) if spans else None

    for name, start, end in PHASES:
        row(name, [phase(trials[b], start, end) for b in backends])
    totals = [statistics.median(t["exited"] - t["spawned"] for t in trials[b]) for b in backends]
    reference = statistics.median(bares)
    row("**total**", list(totals))
    row("two bare interpreters in parallel", [reference] * len(backends))
    row("overhead (total - bare)", [total - reference for total in totals])
    row("spawn to the workers' start", [phase(trials[b], "spawned", "started") for b in backends])
    cpus = [statistics.median(t["cpu"] for t in trials[b]) for b in backends]
    row("agent CPU time, user + sys (interpreter start included)", list(cpus))
    if groups:
        print(
            f"\n| agent imports by package (self time, -X importtime), median ms | "
            f"{' | '.join(backends)} |"
        )
        print(f"|---|{'---|' * len(backends)}")
        last = groups[backends[-1]]
        names = sorted({k for g in groups.values() for k in g}, key=lambda k: -last.get(k, 0))
        for name in names:
            print(f"| {name} | {' | '.join(f'{groups[b].get(name, 0.0):.1f}' for b in backends)} |")
        print(f"| **all** | {' | '.join(f'**{sum(groups[b].values()):.1f}**' for b in backends)} |")
    return 0


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def print_first_lines(trials: int) -> int:
    with tempfile.TemporaryDirectory() as folder:
        script = os.path.join(folder, "first.py")
        with open(script, "w") as out:
            out.write(FIRST)
        first_lines(script, 1)  # warm-up: bytecode caches
        medians = first_lines(script, trials)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{trials} rounds (round-robin), load average after: {load}")
    print("| starter | spawn to both workers' first line, median ms |\n|---|---|")
    for name, seconds in medians.items():
        print(f"| {name} | {seconds * 1000:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
