"""Helpers for the end-to-end tests: real ``tpelastic run`` processes on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def rank_times(factor: int) -> tuple[int, int]:
    """A callable worker for elastic_launch: returns (its global rank, rank * factor)."""
    rank = int(os.environ["RANK"])
    return rank, rank * factor
