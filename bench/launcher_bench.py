"""Launchers side by side: tpelastic run (standalone and c10d), torchrun and tensorplay's run.

Measures, for each launcher that is installed:

* launch overhead of a 2-worker no-op job (wall time minus two bare interpreters in parallel),
  and the time from the launch to the first worker's first line;
* a 2-worker gloo init + all_reduce job, as a multiple of the same job started bare;
* recovery from a worker SIGKILL: to the restarted workers' first line, and to their process
  group being ready again, with the success rate over repeated trials;
* the agent's peak RSS during a 2-worker job.

    python bench/launcher_bench.py --trials 9 --repeat 5
    python bench/launcher_bench.py --launchers tpelastic --no-recovery --repeat 15
    python bench/launcher_bench.py --launchers tpelastic --no-recovery --floors --repeat 15

``tpelastic c10d`` is the multi-node path on one node (``--rdzv-backend c10d`` on a free
loopback port: the agent hosts the rendezvous store and the workers' bootstrap store), beside
``tpelastic`` (``--standalone``) on every run that measures tpelastic. After the table, tpelastic's
rows over torchrun's and tensorplay run's of the same run, as ratios. ``--launchers`` may add
``tpelastic no spares`` and ``tpelastic c10d no spares`` (warm spares off) and ``torchrun c10d``.

Timings are taken round-robin (bare, then each launcher, then again), so that a change of load
on a shared machine hits every column alike; the 1-minute load average is printed with every
row and the medians of its rounds with the timings.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent / "launcher"
REPO = HERE.parents[1]
PY = sys.executable
# The least a launcher written in Python can do (``--floors``, not a launcher anyone uses):
# start an interpreter, pick a port, and start the workers with their environment set. With
# ``core`` it first imports tpelastic's agent machine and steps it to StartWorkers, as issue 5
# requires of tpelastic (the core decides before any worker starts). The gap between these and
# ``bare`` is what no trimming of tpelastic's other code can take away.
FLOOR = """
import os, socket, subprocess, sys, time
if sys.argv[1] == "core":
    from tpelastic.core import agent as core
    config = core.AgentConfig(
        max_restarts=0, min_nodes=1, max_nodes=1, local_world_size=2, role="default"
    )
    step = core.step(core.initial_state(config), core.AgentStarted(now=time.monotonic()), config)
    round = core.RoundCompleted(
        now=time.monotonic(), round=0, group_rank=0, group_world_size=1, restart_count=0
    )
    step = core.step(step.state, round, config)
    assert any(isinstance(e, core.StartWorkers) for e in step.effects), step
with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = str(probe.getsockname()[1])
workers = [
    subprocess.Popen(
        [sys.executable, "-u", sys.argv[-1]],
        env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port},
        start_new_session=True,
    )
    for r in (0, 1)
]
sys.exit(max(w.wait() for w in workers))
"""
LAUNCHERS = {
    "tpelastic": ([PY, "-m", "tpelastic.run"], "job_tensorplay.py"),
    "tpelastic c10d": ([PY, "-m", "tpelastic.run"], "job_tensorplay.py"),
    "torchrun": ([PY, "-m", "torch.distributed.run"], "job_torch.py"),
    "tensorplay run": ([PY, "-m", "tensorplay.distributed.run"], "job_tensorplay.py"),
}
# Not run unless asked for (--launchers): torchrun's c10d path beside its --standalone, and
# tpelastic with warm spares off (they are on by default; see WARM_OFF).
OPTIONAL = {
    "torchrun c10d": ([PY, "-m", "torch.distributed.run"], "job_torch.py"),
    "tpelastic no spares": ([PY, "-m", "tpelastic.run"], "job_tensorplay.py"),
    "tpelastic c10d no spares": ([PY, "-m", "tpelastic.run"], "job_tensorplay.py"),
}
# Launchers run with warm spares off, to show what the spares cost a short job: nothing, since
# the first are made TPELASTIC_WARM_DELAY (5 s) after the first start, later than these jobs end.
WARM_OFF = {"tpelastic no spares", "tpelastic c10d no spares"}
KNOWN = {**LAUNCHERS, **OPTIONAL}
FLOORS = {
    "floor: python": ([PY, "-c", FLOOR, "python"], "job_tensorplay.py"),
    "floor: core decides": ([PY, "-c", FLOOR, "core"], "job_tensorplay.py"),
}


# False with --installed: measure the tpelastic installed in this interpreter (a regular, not
# editable, install: no import finder in site, as users get it), not the checkout.
REPO_ON_PATH = True


def env(name: str = "", **extra: str) -> dict[str, str]:
    out = {**os.environ, "TPELASTIC_LOG_LEVEL": "WARNING", **extra}
    if name in WARM_OFF:
        out["TPELASTIC_WARM_WORKERS"] = "0"
    if REPO_ON_PATH:
        out["PYTHONPATH"] = str(REPO)
    out.setdefault("OMP_NUM_THREADS", "1")
    # With PYTHONDONTWRITEBYTECODE set (as in some dev shells) every run compiles tpelastic from
    # source, which no installed copy does: measure what users get, with cached bytecode.
    out.pop("PYTHONDONTWRITEBYTECODE", None)
    return out


def free_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


# Launchers measured on the c10d backend with one node. tensorplay's run has no --standalone;
# its c10d backend on a free loopback port is the same.
C10D = {"tpelastic c10d", "tpelastic c10d no spares", "torchrun c10d", "tensorplay run"}


def one_node(name: str) -> list[str]:
    if name in C10D:
        return [
            "--nnodes",
            "1",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"127.0.0.1:{free_port()}",
        ]
    return ["--standalone"]


def launch(name: str, *, restarts: int = 0, **extra: str) -> tuple[float, str, int]:
    base, job = KNOWN.get(name) or FLOORS[name]
    cmd = [*base, *one_node(name), "--nproc-per-node", "2", "--max-restarts", str(restarts)]
    global LAST_START
    LAST_START = time.time()  # the workers' START lines are on this clock
    started = time.perf_counter()
    # A session of its own, so that a launcher that hangs can be stopped with all its workers.
    proc = subprocess.Popen(
        [*cmd, str(HERE / job)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env(name, **extra),
        start_new_session=True,
    )
    try:
        text, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        return time.perf_counter() - started, "timed out after 60 s", -1
    return time.perf_counter() - started, text, proc.returncode


def kill_tree(proc: subprocess.Popen[str]) -> None:
    family = [proc.pid, *(p.pid for p in psutil.Process(proc.pid).children(recursive=True))]
    for pid in family:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, 9)
    except ProcessLookupError:
        pass
    proc.communicate()


def bare(job: str, **extra: str) -> float:
    port = free_port()
    started = time.perf_counter()
    procs = [
        subprocess.Popen(
            [PY, str(HERE / job)],
            env=env(
                RANK=str(r),
                WORLD_SIZE="2",
                LOCAL_RANK=str(r),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
                **extra,
            ),
            stdout=subprocess.DEVNULL,
            # As every launcher here starts its workers: each in a session of its own. With the
            # kernel's autogroup scheduling a session is a scheduling group, so on a loaded
            # machine two workers sharing one session get half the CPU of two that do not.
            start_new_session=True,
        )
        for r in (0, 1)
    ]
    for proc in procs:
        proc.wait(timeout=120)
    return time.perf_counter() - started


LAST_START = 0.0


def first_worker(text: str) -> float:
    """Seconds from the last launch to its first worker's START line (nan without one)."""
    starts = [float(x) for x in re.findall(r"START (\d+\.\d+)", text)]
    return min(starts) - LAST_START if starts else float("nan")


def timed(name: str, **extra: str) -> tuple[float, float]:
    """Wall time of one launch, and the time to its first worker's first line."""
    took, text, code = launch(name, **extra)
    if code != 0:
        raise SystemExit(f"{name} failed (exit {code}):\n{text[-2000:]}")
    return took, first_worker(text)


def installed(name: str) -> bool:
    module = KNOWN[name][0][-1]
    done = subprocess.run([PY, "-c", f"import {module}"], capture_output=True, env=env(name))
    return done.returncode == 0


def recovery(name: str) -> tuple[float, float] | None:
    took, text, code = launch(name, restarts=1, BENCH_KILL="1")
    kill = [float(x) for x in re.findall(r"KILL (\d+\.\d+)", text)]
    starts = [float(x) for x in re.findall(r"START (\d+\.\d+) restart 1", text)]
    readies = re.findall(r"READY (\d+\.\d+)", text)
    if code != 0 or not kill or len(starts) < 2 or len(readies) < 4:
        return None
    ready_after = sorted(float(x) for x in readies)[-2:]
    return min(starts) - kill[0], max(ready_after) - kill[0]


def peak_rss(name: str) -> float:
    """The launcher's own process (the agent), sampled every 10 ms during a 2-worker gloo job:
    its workers and any warm spares are processes of their own and are not counted."""
    base, job = KNOWN[name]
    cmd = [*base, *one_node(name), "--nproc-per-node", "2", str(HERE / job)]
    proc = subprocess.Popen(
        cmd, env=env(name), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    agent, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            peak = max(peak, agent.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        time.sleep(0.01)
    return peak / 2**20


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def uptime() -> str:
    """``uptime``'s line (the load averages with the time), or the load averages alone."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return f"load average: {load()}"


def load1() -> float:
    return os.getloadavg()[0]


def round_robin(names: list[str], repeat: int) -> dict[str, list[float]]:
    """Wall times keyed ``bare noop``, ``bare gloo``, ``<launcher> noop``, ``<launcher> gloo``;
    ``<launcher> first`` the no-op job's time to its first worker; ``load`` per round."""
    times: dict[str, list[float]] = {}
    for _ in range(repeat):
        times.setdefault("load", []).append(load1())
        for job, extra in (("noop", {"BENCH_NOOP": "1"}), ("gloo", {})):
            times.setdefault(f"bare {job}", []).append(bare("job_tensorplay.py", **extra))
            for name in names:
                took, first = timed(name, **extra)
                times.setdefault(f"{name} {job}", []).append(took)
                if job == "noop":
                    times.setdefault(f"{name} first", []).append(first)
    return times


def recoveries(name: str, trials: int) -> tuple[float, float, int]:
    ok = [t for t in (recovery(name) for _ in range(trials)) if t is not None]
    first = statistics.median(t[0] for t in ok) if ok else float("nan")
    ready = statistics.median(t[1] for t in ok) if ok else float("nan")
    return first, ready, len(ok)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=9, help="recovery trials per launcher")
    parser.add_argument("--repeat", type=int, default=5, help="runs per timing (median)")
    parser.add_argument("--launchers", default=",".join(LAUNCHERS), help="comma-separated")
    parser.add_argument("--no-recovery", action="store_true", help="skip the recovery trials")
    parser.add_argument(
        "--floors",
        action="store_true",
        help="also time the least a Python launcher can do (see FLOOR): no-op and gloo jobs only",
    )
    parser.add_argument(
        "--installed",
        action="store_true",
        help="use the tpelastic installed in this interpreter, not the checkout",
    )
    args = parser.parse_args()
    if args.installed:
        global REPO_ON_PATH
        REPO_ON_PATH = False
        os.chdir(tempfile.gettempdir())  # `python -m` puts the working folder on sys.path
    wanted = [n.strip() for n in args.launchers.split(",")]
    unknown = [n for n in wanted if n not in KNOWN]
    if unknown:
        raise SystemExit(f"unknown launcher(s) {unknown}: choose from {list(KNOWN)}")
    if "tpelastic" in wanted and "tpelastic c10d" not in wanted:
        # The multi-node path is the one users take: measured beside standalone every run.
        wanted.insert(wanted.index("tpelastic") + 1, "tpelastic c10d")
    names = [n for n in wanted if installed(n)]
    floors = list(FLOORS) if args.floors else []
    print(f"uptime before: {uptime()}", flush=True)
    runs = round_robin(names + floors, args.repeat)
    times = {k: statistics.median(v) for k, v in runs.items()}
    bare_noop, bare_gloo = times["bare noop"], times["bare gloo"]
    loads = runs["load"]
    print(
        f"bare: no-op {bare_noop:.3f} s, gloo init + all_reduce {bare_gloo:.3f} s "
        f"(1-min load over the rounds: median {times['load']:.2f}, "
        f"{min(loads):.2f}-{max(loads):.2f})"
    )
    print(
        "| launcher | no-op job | overhead | first worker | gloo job | x bare | recovery: "
        "first line | recovery: group ready | recovery success | agent peak RSS | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rss: dict[str, float] = {}
    for name in names + floors:
        noop, gloo = times[f"{name} noop"], times[f"{name} gloo"]
        row = f"| {name} | {noop:.3f} s | {noop - bare_noop:.3f} s | "
        row += f"{times[f'{name} first']:.3f} s | {gloo:.3f} s | {gloo / bare_gloo:.2f} | "
        if args.no_recovery or name in FLOORS:
            row += "- | - | - | "
        else:
            first, ready, ok = recoveries(name, args.trials)
            row += f"{first:.3f} s | {ready:.3f} s | {ok}/{args.trials} | "
        if name in FLOORS:
            row += "- | "
        else:
            rss[name] = statistics.median(peak_rss(name) for _ in range(3))
            row += f"{rss[name]:.0f} MiB | "
        print(row + f"{load1():.2f} |", flush=True)
    print_ratios(times, rss, names)
    print_paired(runs, names + floors)
    print(f"uptime after: {uptime()}")
    return 0


OURS = ("tpelastic", "tpelastic c10d")
ANCHORS = ("torchrun", "torchrun c10d", "tensorplay run")


def print_ratios(times: dict[str, float], rss: dict[str, float], names: list[str]) -> None:
    """tpelastic's rows over each anchor's of the same run: no-op overhead, gloo job time and
    agent peak RSS (below 1: tpelastic is faster or smaller)."""
    ours = [n for n in OURS if n in names]
    anchors = [n for n in ANCHORS if n in names]
    if not ours or not anchors:
        return
    print("\nRatios in this run (tpelastic's over the anchor's; < 1: tpelastic is better):")
    print("| launcher | against | no-op overhead | gloo job | agent peak RSS |")
    print("|---|---|---|---|---|")
    bare_noop = times["bare noop"]
    for name in ours:
        for anchor in anchors:
            over = (times[f"{name} noop"] - bare_noop) / (times[f"{anchor} noop"] - bare_noop)
            gloo = times[f"{name} gloo"] / times[f"{anchor} gloo"]
            size = rss[name] / rss[anchor] if rss.get(anchor) else float("nan")
            print(f"| {name} | {anchor} | {over:.2f} | {gloo:.2f} | {size:.2f} |")


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """Lower quartile, median and upper quartile (the median of one value is that value)."""
    if len(values) < 2:
        return values[0], values[0], values[0]
    low, mid, high = statistics.quantiles(values, n=4)
    return low, statistics.median(values), high


def print_paired(runs: dict[str, list[float]], names: list[str]) -> None:
    """Each launcher against the bare jobs of the same round, then the spread of those pairs.

    A change of load between rounds moves both runs of a pair alike, so the spread of the pairs
    says how far one run's ratio can be trusted (the gloo job's moves by tenths on a busy
    machine while its median barely shifts).
    """
    print(
        "\nPaired by round (launcher against the bare job of the same round), median [quartiles]:"
    )
    print("| launcher | no-op overhead | gloo job x bare |")
    print("|---|---|---|")
    for name in names:
        over = [a - b for a, b in zip(runs[f"{name} noop"], runs["bare noop"], strict=True)]
        ratio = [a / b for a, b in zip(runs[f"{name} gloo"], runs["bare gloo"], strict=True)]
        (o1, o2, o3), (r1, r2, r3) = quartiles(over), quartiles(ratio)
        print(f"| {name} | {o2:.3f} s [{o1:.3f}-{o3:.3f}] | {r2:.2f} [{r1:.2f}-{r3:.2f}] |")


if __name__ == "__main__":
    sys.exit(main())
