"""In-process restart against full restarts: worker failure -> every rank training again.

In one run, round-robin over ``--trials`` trials, two workers on one node:

* ``tpelastic in-process``: the job trains through ``tpelastic.worker.run``
  (``bench/inprocess/job_inprocess.py``); rank 1 raises once 0.2 s after its group formed
  (``raise``) or SIGKILLs itself once 10 s after (``kill``: its respawn takes a warm spare),
  ``--standalone`` and the multi-node path (``--rdzv-backend c10d`` on a free loopback port);
* full restarts of the launcher benchmark's job (``bench/launcher/job_*.py``, rank 1 SIGKILLs
  itself once): ``tpelastic run``, torchrun 2.13 and ``python -m tensorplay.distributed.run``.

The recovery is from the failing rank's ``FAIL``/``KILL`` line to the last rank's ``READY``
line of the next attempt (its group formed and an all_reduce agreed), on the workers' wall
clock. ``--loop N`` also runs one job with N consecutive in-process restarts (a different rank
raises each time) and reports how many re-formed their group and the recovery's spread.

    python bench/inprocess_restart.py --trials 7 --loop 50
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PY = sys.executable
JOB = HERE / "inprocess" / "job_inprocess.py"
FULL = {
    "tpelastic (full restart)": (["-m", "tpelastic.run", "--standalone"], "job_tensorplay.py"),
    "torchrun (full restart)": (["-m", "torch.distributed.run", "--standalone"], "job_torch.py"),
    "tensorplay run (full restart)": (["-m", "tensorplay.distributed.run", "c10d"], ""),
}


def free_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


def env(**extra: str) -> dict[str, str]:
    out = {**os.environ, "TPELASTIC_LOG_LEVEL": "WARNING", "PYTHONPATH": str(REPO), **extra}
    out.setdefault("OMP_NUM_THREADS", "1")
    out.pop("PYTHONDONTWRITEBYTECODE", None)
    return out


def c10d() -> list[str]:
    return [
        "--nnodes",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{free_port()}",
    ]


def run(cmd: list[str], extra: dict[str, str], timeout: float) -> tuple[int, str]:
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env(**extra),
        start_new_session=True,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # The workers run in sessions of their own: a launcher that hangs (or leaves them
        # behind) has its whole tree stopped, or the pipe never closes.
        import psutil

        tree = psutil.Process(proc.pid).children(recursive=True)
        os.killpg(proc.pid, signal.SIGKILL)
        for child in tree:
            try:
                child.kill()
            except psutil.Error:
                pass
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            out = ""
        return -9, out
    return proc.returncode, out


def stamps(out: str, word: str) -> list[float]:
    return [float(m) for m in re.findall(rf"{word} (\d+\.\d+)", out)]


def in_process(
    backend: str, mode: str, failures: int, timeout: float
) -> tuple[list[float], int, str]:
    """Recoveries of one in-process job, how many restarts re-formed, and its output."""
    where = ["--standalone"] if backend == "standalone" else c10d()
    cmd = [
        PY,
        "-m",
        "tpelastic.run",
        *where,
        "--nproc-per-node",
        "2",
        "--max-restarts",
        str(failures),
        str(JOB),
    ]
    # A SIGKILLed worker is respawned: from a warm interpreter, once its spare has imported
    # (spares start 5 s after the first workers), as in a job that trained a while.
    after = "10" if mode == "kill" else "0.2"
    extra = {"BENCH_FAILURES": str(failures), "BENCH_MODE": mode, "BENCH_FAIL_AFTER": after}
    code, out = run(cmd, extra, timeout)
    ready: dict[int, list[float]] = {}
    for ts, restart in re.findall(r"READY (\d+\.\d+) restart (\d+)", out):
        ready.setdefault(int(restart), []).append(float(ts))
    fails = dict((int(r), float(t)) for t, r in re.findall(r"FAIL (\d+\.\d+) restart (\d+)", out))
    recoveries = [
        max(ready[k + 1]) - fails[k] for k in sorted(fails) if len(ready.get(k + 1, [])) == 2
    ]
    formed = len(recoveries) if code == 0 else 0
    return recoveries, formed, out


def full(name: str, timeout: float) -> float | None:
    args, job = FULL[name]
    if job:
        cmd = [
            PY,
            *args,
            "--nproc-per-node",
            "2",
            "--max-restarts",
            "1",
            str(HERE / "launcher" / job),
        ]
    else:
        cmd = [
            PY,
            "-m",
            "tensorplay.distributed.run",
            *c10d(),
            "--nproc-per-node",
            "2",
            "--max-restarts",
            "1",
            str(HERE / "launcher" / "job_tensorplay.py"),
        ]
    code, out = run(cmd, {"BENCH_KILL": "1"}, min(timeout, 45.0))
    kill = stamps(out, "KILL")
    after = [t for t in stamps(out, "READY") if kill and t > kill[0]]
    if code != 0 or not kill or len(after) < 2:
        return None
    return max(after[:2]) - kill[0]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def summary(values: list[float]) -> str:
    if not values:
        return "n/a"
    qs = sorted(values)
    return f"{statistics.median(qs):.3f} s [{qs[0]:.3f}-{qs[-1]:.3f}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--loop", type=int, default=0, help="consecutive in-process restarts")
    parser.add_argument("--no-full", action="store_true", help="only the in-process rows")
    parser.add_argument("--timeout", type=float, default=90.0)
    args = parser.parse_args()
    rows: dict[str, list[float]] = {}
    tried: dict[str, int] = {}
    loads: dict[str, str] = {}
    print(f"load before: {load()}", flush=True)
    inproc = [("standalone", "raise"), ("standalone", "kill"), ("c10d", "raise")]
    for _ in range(args.trials):
        for backend, mode in inproc:
            name = f"tpelastic in-process, {backend}, {mode}"
            got, formed, out = in_process(backend, mode, 1, args.timeout)
            tried[name] = tried.get(name, 0) + 1
            rows.setdefault(name, []).extend(got)
            loads[name] = load()
            if not got:
                print(f"{name}: no recovery measured\n{out[-2000:]}", file=sys.stderr)
        if args.no_full:
            continue
        for name in FULL:
            took = full(name, args.timeout)
            tried[name] = tried.get(name, 0) + 1
            rows.setdefault(name, []).extend([took] if took is not None else [])
            loads[name] = load()
    base = statistics.median(rows["tpelastic in-process, standalone, raise"] or [float("nan")])
    print("\n| path | recovery, median [min-max] | success | x in-process | load (1/5/15 min) |")
    print("|---|---|---|---|---|")
    for name, values in rows.items():
        ratio = statistics.median(values) / base if values else float("nan")
        ok = f"{len(values)}/{tried[name]}"
        print(f"| {name} | {summary(values)} | {ok} | {ratio:.1f}x | {loads[name]} |")
    if args.loop:
        started = time.monotonic()
        got, formed, out = in_process("standalone", "raise", args.loop, args.timeout * 4)
        took = time.monotonic() - started
        pids = len(set(re.findall(r"pid (\d+)", out)))
        print(
            f"\nloop: {formed}/{args.loop} consecutive in-process restarts re-formed their group "
            f"(all in process: {formed == args.loop}), {pids} worker pids over the whole job, "
            f"recovery {summary(got)}, p90 "
            f"{sorted(got)[int(0.9 * (len(got) - 1))] if got else float('nan'):.3f} s, "
            f"{took:.1f} s total, load {load()}"
        )
        if formed != args.loop:
            print(out[-3000:], file=sys.stderr)
    print(f"load after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
