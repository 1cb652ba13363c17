"""Helpers for the observability tests: real ``tpelastic run`` processes on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import machine_load

REPO = Path(__file__).resolve().parents[2]
WORKER = str(Path(__file__).resolve().parent / "scripts" / "obs_worker.py")
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def fast_detection(last_call: float, rest: str) -> str:
    """A rendezvous conf: keep-alive 0.3 s x 3 and a ``last_call`` s last call on a quiet
    machine, stretched by its load now (tests/machine_load.py), then ``rest``."""
    load = machine_load.factor()
    return (
        f"keep_alive_interval={0.3 * load:g},keep_alive_max_attempt=3,"
        f"last_call_timeout={last_call * load:g},{rest}"
    )


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TPELASTIC_", "PET_"))}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _cmd(*args: str, standalone: bool = True) -> list[str]:
    alone = ["--standalone"] if standalone else []
    return [sys.executable, "-m", "tpelastic", "run", *alone, *args]


def tprun(*args: str, timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
    """Run ``tpelastic run --standalone ARGS`` to its end."""
    return subprocess.run(_cmd(*args), capture_output=True, text=True, timeout=timeout, env=_env())


def tpstart(*args: str, log: Path, standalone: bool = True) -> subprocess.Popen[bytes]:
    """Start ``tpelastic run [--standalone] ARGS`` in the background, output to ``log``."""
    cmd = _cmd(*args, standalone=standalone)
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=_env())


def http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5.0) as response:
        return str(response.read().decode("utf-8"))


def wait_for(probe: Callable[[], T | None], timeout: float = 60.0, what: str = "it") -> T:
    """Poll ``probe`` until it returns something other than None (errors count as None)."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            found = probe()
            if found is not None:
                return found
        except Exception as error:  # not up yet: keep polling
            last = error
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what} (last error: {last})")


def finish(proc: subprocess.Popen[bytes], timeout: float = 60.0) -> int:
    """Wait for ``proc``; kill it (by pid) if it overruns, and fail."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        raise AssertionError("tpelastic run did not finish in time") from None


def timed_steps(steps: int) -> tuple[int, str, int | None]:
    """A callable worker for elastic_launch: steps the heartbeat inside a timer block.

    Returns (its rank, its timer file, its last progress counter): both files come from the
    agent, with no setup in the worker.
    """
    from tpelastic.timer import expires, progress

    last = None
    with expires(after=30, scope="api-steps"):
        for _ in range(steps):
            last = progress.step()
    return int(os.environ["RANK"]), os.environ["TPELASTIC_TIMER_FILE"], last


def two_tcp_nodes_with_a_crash(tmp_path: Path, run_id: str, events: Path) -> list[int]:
    """Two agents on the tcp backend (one world of 2), both recording to ``events``; rank 1's
    worker crashes once, so the round restarts in place (attempt 1). Returns both exit codes."""
    port = free_port()
    fast = "keep_alive_interval=0.3,keep_alive_max_attempt=3,last_call_timeout=0.5,join_timeout=30"
    nodes = [
        tpstart(
            "--nnodes",
            "2",
            "--nproc-per-node",
            "1",
            "--rdzv-backend",
            "tcp",
            "--rdzv-endpoint",
            f"127.0.0.1:{port}",
            "--rdzv-id",
            run_id,
            "--local-addr",
            "127.0.0.1",
            "--rdzv-conf",
            fast,
            "--max-restarts",
            "1",
            "--events-file",
            str(events),
            WORKER,
            "--crash-rank",
            "1",
            log=tmp_path / f"node{i}.log",
            standalone=False,
        )  # fmt: skip
        for i in range(2)
    ]
    return [finish(proc, timeout=90) for proc in nodes]
