"""In-process restart with real agents and real gloo groups (``--standalone``, two workers
that train through ``tpelastic.worker.run``): a raise restarts every worker in its own process,
a killed worker is the only one started again, and a worker that does not take the stop in
time falls back to a full restart."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import machine_load
import pytest
from e2e_helpers import launcher_env, run_cmd

pytestmark = pytest.mark.slow

SCRIPT = str(Path(__file__).resolve().parent / "scripts" / "inprocess_worker.py")
STEPS = 6


def _run(out: Path, *flags: str, env: dict[str, str] | None = None) -> str:
    args = ("--standalone", "--nproc-per-node", "2", "--max-restarts", "3")
    cmd = run_cmd(*args, SCRIPT, "--out", str(out), "--steps", str(STEPS), *flags)
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env={**launcher_env(), **(env or {})}
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stderr


def _entries(out: Path) -> dict[tuple[int, int], dict[str, Any]]:
    """(rank, restart count) -> the pid, step and restarts of each entry into training."""
    found = {}
    for path in out.glob("enter_rank*_r*_pid*.json"):
        rank, restart, pid = map(int, re.findall(r"\d+", path.name))
        found[(rank, restart)] = {"pid": pid, **json.loads(path.read_text())}
    return found


def _done(out: Path, rank: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / f"done_rank{rank}.json").read_text())
    assert data["step"] == STEPS
    assert data["sums"] == [2.0 * s for s in range(STEPS)]  # every step's all_reduce agreed
    return data


def test_K5_a_raise_restarts_in_process_and_every_worker_keeps_its_pid(out: Path) -> None:
    log = _run(out, "--raise-at", "3")
    seen = _entries(out)
    assert sorted(seen) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for rank in (0, 1):
        first, again = seen[(rank, 0)], seen[(rank, 1)]
        assert again["pid"] == first["pid"]  # the same process
        assert (again["step"], again["restarts"]) == (3, 1)  # from the committed state
        done = _done(out, rank)
        assert (done["pid"], done["restart"], done["restarts"]) == (first["pid"], 1, 1)
    assert "rank 1 raised on purpose" in log
    assert "local rank(s) [0, 1] kept, none respawned" in log


def test_K6_a_killed_worker_is_the_only_one_respawned(out: Path) -> None:
    log = _run(out, "--kill-at", "3")
    seen = _entries(out)
    assert sorted(seen) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert seen[(0, 1)]["pid"] == seen[(0, 0)]["pid"]  # the survivor kept its process
    assert seen[(1, 1)]["pid"] != seen[(1, 0)]["pid"]  # the killed one is new
    # Both resumed from rank 0's committed state: the new process took it at the start.
    assert seen[(0, 1)]["step"] == 3 and seen[(1, 1)]["step"] == 3
    assert (_done(out, 0)["restarts"], _done(out, 1)["restarts"]) == (1, 0)
    assert "local rank(s) [0] kept, [1] respawned" in log


def test_K7_a_worker_that_ignores_the_stop_falls_back_to_a_full_restart(out: Path) -> None:
    bound = f"{1.5 * machine_load.factor():g}"
    env = {"TPELASTIC_IN_PROCESS_STOP_TIMEOUT": bound}
    log = _run(out, "--raise-at", "3", "--ignore-at", "3", env=env)
    seen = _entries(out)
    assert sorted(seen) == [(0, 0), (0, 1), (1, 0), (1, 1)]  # one restart, spent once
    for rank in (0, 1):
        assert seen[(rank, 1)]["pid"] != seen[(rank, 0)]["pid"]  # every process new
        assert _done(out, rank)["restart"] == 1
    assert "did not answer 'stopped'" in log and "full restart" in log
