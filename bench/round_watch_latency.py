"""How fast running agents learn of a new round: the round watcher against the periodic look.

Three agents (``tpelastic run`` processes, tcp backend, our TCPStore hosted by agent A, one
worker each that only sleeps) with ``--nnodes 1:3``. Per trial: A and B form a world of 2, C
joins (scale-up to 3), then C leaves gracefully (SIGTERM; back to 2). Times come from the
agents' own step records (``--events-file``: each observation's ``now`` is the system-wide
monotonic clock) and, for the SIGTERM, from this process's clock just before the signal:

* join seen: C's first step (its join call follows at once) -> each survivor's first
  ``NodesWaiting`` or ``NextRoundOpened`` (the peer that saw C first opened the round for it),
  the later of A and B
* join round: C's first step -> the last survivor's ``RoundCompleted`` of the world of 3
* leave seen: SIGTERM to C -> the survivors' ``NextRoundOpened`` (the later of A and B)
* leave round: SIGTERM to C -> the last survivor's ``RoundCompleted`` of the world of 2

Modes alternate trial by trial: ``watch`` (the default) and ``look`` (``TPELASTIC_ROUND_WATCH=0``:
the loop looks every 0.25 s, as before the watcher). Medians and ranges, with the load average.

    python bench/round_watch_latency.py --trials 5
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "e2e" / "scripts" / "round_marker.py"
CONF = "keep_alive_interval=1,keep_alive_max_attempt=30,last_call_timeout=0.3,join_timeout=60"
# What a survivor observes first: the arrival itself, or the round its peer opened for it.
_CHANGE = ("NodesWaiting", "NextRoundOpened")
MODES = {"watch": {}, "look": {"TPELASTIC_ROUND_WATCH": "0"}}


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _agent(
    port: int, tmp: Path, name: str, env: dict[str, str], host: bool
) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "tpelastic", "run", "--nnodes", "1:3", "--nproc-per-node", "1",
        "--rdzv-backend", "tcp", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "bench",
        "--local-addr", "127.0.0.1", "--rdzv-conf", f"{CONF},is_host={int(host)}",
        "--monitor-interval", "0.1", "--events-file", str(tmp / f"{name}.jsonl"),
        str(WORKER), "--out", str(tmp),
    ]  # fmt: skip
    full = {**os.environ, **env, "PYTHONPATH": str(REPO)}
    with open(tmp / f"{name}.log", "wb") as log:
        return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=full)


def _steps(tmp: Path, name: str) -> list[dict[str, Any]]:
    path = tmp / f"{name}.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line still being written
        if record.get("name") == "agent.step":
            out.append(record["metadata"]["event"])
    return out


def _completed(tmp: Path, name: str, nodes: int, after: int) -> dict[str, Any] | None:
    for event in _steps(tmp, name):
        if event["type"] == "RoundCompleted" and event["group_world_size"] == nodes:
            if event["round"] > after:
                return event
    return None


def _both(tmp: Path, nodes: int, after: int, timeout: float = 60.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = [_completed(tmp, n, nodes, after) for n in ("a", "b")]
        if all(got):
            return got  # type: ignore[return-value]
        time.sleep(0.05)
    raise RuntimeError(f"no world of {nodes} after round {after} in {timeout} s (see {tmp})")


def _first(tmp: Path, name: str, after: float, *kinds: str) -> float:
    times = [e["now"] for e in _steps(tmp, name) if e["type"] in kinds and e["now"] >= after]
    if not times:
        raise RuntimeError(f"{name}: no {kinds} after {after}")
    return min(times)


def trial(mode: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp, env, port = Path(tmp_name), MODES[mode], _port()
        procs = [_agent(port, tmp, "a", env, True), _agent(port, tmp, "b", env, False)]
        try:
            two = _both(tmp, 2, -1)
            time.sleep(1.0)  # settle: both run their workers, watchers in their waits
            procs.append(_agent(port, tmp, "c", env, False))
            three = _both(tmp, 3, two[0]["round"])
            c_start = min(e["now"] for e in _steps(tmp, "c"))
            time.sleep(1.0)
            sigterm = time.monotonic()
            procs[2].send_signal(signal.SIGTERM)
            back = _both(tmp, 2, three[0]["round"])
            return {
                "join seen": max(_first(tmp, n, c_start, *_CHANGE) for n in "ab") - c_start,
                "join round": max(e["now"] for e in three) - c_start,
                "leave seen": max(_first(tmp, n, sigterm, *_CHANGE) for n in "ab") - sigterm,
                "leave round": max(e["now"] for e in back) - sigterm,
            }
        finally:
            for proc in reversed(procs):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    load = [os.getloadavg()[0]]
    for _ in range(args.trials):
        for mode in MODES:
            results[mode].append(trial(mode))
            load.append(os.getloadavg()[0])
    print(f"trials {args.trials} per mode; load average (1 min) {min(load):.2f}-{max(load):.2f}")
    print(f"{'metric':<12} " + "  ".join(f"{m + ' median [min-max] s':<28}" for m in MODES))
    for metric in results["watch"][0]:
        cells = []
        for mode in MODES:
            values = [r[metric] for r in results[mode]]
            cells.append(f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]")
        print(f"{metric:<12} " + "  ".join(f"{c:<28}" for c in cells))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
