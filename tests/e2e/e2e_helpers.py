"""Helpers for the end-to-end tests: real ``tpelastic run`` processes on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import machine_load
import psutil

REPO = Path(__file__).resolve().parents[2]
WORKER = str(Path(__file__).resolve().parent / "scripts" / "worker.py")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def launcher_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("OMP_NUM_THREADS", None)
    return env


def run_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "tpelastic", "run", *args]


def tprun(*args: str, timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
    """Run ``tpelastic run ARGS`` to its end."""
    return subprocess.run(
        run_cmd(*args), capture_output=True, text=True, timeout=timeout, env=launcher_env()
    )


def tpstart(*args: str, log: Path) -> subprocess.Popen[bytes]:
    """Start ``tpelastic run ARGS`` in the background, output to ``log``."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            run_cmd(*args), stdout=out, stderr=subprocess.STDOUT, env=launcher_env()
        )


def records(out: Path) -> list[dict[str, Any]]:
    """What every worker recorded, with its round taken from the file name."""
    found = []
    for path in sorted(out.glob("r*_rank*_pid*.json")):
        data = json.loads(path.read_text())
        data["round"] = int(path.name.split("_")[0][1:])
        found.append(data)
    return found


def fast_detection(load: float = 1.0) -> str:
    """Fast failure detection for the tests: on a quiet machine a heartbeat every 0.3 s, dead
    after 3 missed, last call 0.5 s; ``load`` (tests/machine_load.py) stretches the times, so
    a busy machine's scheduling delay is not taken for a dead node."""
    return (
        f"keep_alive_interval={0.3 * load:g},keep_alive_max_attempt=3,"
        f"last_call_timeout={0.5 * load:g},join_timeout=30"
    )


FAST = fast_detection()


def tcp_node(
    port: int,
    run_id: str,
    nnodes: str,
    log: Path,
    *worker_args: str,
    restarts: int = 0,
    conf: str = "",
    extra: tuple[str, ...] = (),
    detection: str | None = None,
) -> subprocess.Popen[bytes]:
    """One ``tpelastic run`` agent of run ``run_id`` on the tcp backend at ``port`` (the first
    to come hosts the store), two workers, fast failure detection (``detection``, the start
    of the rendezvous conf; by default :func:`fast_detection` at the machine's load now);
    ``extra`` flags go before the script."""
    if detection is None:
        detection = fast_detection(machine_load.factor())
    return tpstart(
        "--nnodes",
        nnodes,
        "--nproc-per-node",
        "2",
        "--rdzv-backend",
        "tcp",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        run_id,
        "--local-addr",
        "127.0.0.1",
        "--rdzv-conf",
        detection + conf,
        "--monitor-interval",
        "0.1",
        "--max-restarts",
        str(restarts),
        *extra,
        WORKER,
        *worker_args,
        log=log,
    )


def finish(proc: subprocess.Popen[bytes], log: Path, timeout: float = 90.0) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"agent did not finish:\n{log.read_text()[-3000:]}") from None


def wait_for_records(out: Path, count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while len(records(out)) < count:
        assert time.monotonic() < deadline, f"only {len(records(out))} of {count} records"
        time.sleep(0.1)


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def rank_times(factor: int) -> tuple[int, int]:
    """A callable worker for elastic_launch: returns (its global rank, rank * factor)."""
    rank = int(os.environ["RANK"])
    return rank, rank * factor
