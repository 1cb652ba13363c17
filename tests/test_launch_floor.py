"""The launcher bench's floors (``bench/launcher_bench.py --floors``) keep doing what they claim.

A floor is the least a Python launcher can do before its workers run: ``python`` starts them at
once, ``core`` first steps tpelastic's agent machine to StartWorkers. docs/benchmarks-launcher.md
compares tpelastic with them; if the core's API moved and the floor silently stopped stepping it,
that comparison would be wrong. Real processes; nothing is timed.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "launcher_bench.py"

WORKER = textwrap.dedent(
    """
    import os
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    line = "ENV " + " ".join(f"{k}={os.environ[k]}" for k in keys) + "\\n"
    os.write(1, line.encode())  # one write: both workers share the pipe (print may make several)
    """
)


def _bench():
    spec = importlib.util.spec_from_file_location("launcher_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("mode", ["python", "core"])
def test_a_floor_starts_two_workers_with_their_environment(tmp_path, mode):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "PYTHONPATH": str(BENCH.parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", _bench().FLOOR, mode, "--standalone", str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = sorted(line for line in done.stdout.splitlines() if line.startswith("ENV "))
    assert [line.split()[1:4] for line in lines] == [
        ["RANK=0", "LOCAL_RANK=0", "WORLD_SIZE=2"],
        ["RANK=1", "LOCAL_RANK=1", "WORLD_SIZE=2"],
    ]
    assert len({line.split()[-1] for line in lines}) == 1  # one MASTER_PORT for both


def test_the_core_floor_fails_loudly_when_the_machine_does_not_say_start(tmp_path):
    # The floor asserts on the machine's answer: with a world the config cannot take
    # (2 nodes where max_nodes is 1) the step does not say StartWorkers, and it must not start.
    floor = _bench().FLOOR.replace("group_world_size=1", "group_world_size=2")
    assert floor != _bench().FLOOR
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "PYTHONPATH": str(BENCH.parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", floor, "core", str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode != 0
    assert "ENV " not in done.stdout
    assert "AssertionError" in done.stderr


def test_the_first_line_comparison_runs_every_starter():
    phases = BENCH.parent / "launch_phases.py"
    env = {**os.environ, "PYTHONPATH": str(BENCH.parents[1]), "TPELASTIC_LOG_LEVEL": "WARNING"}
    done = subprocess.run(
        [sys.executable, str(phases), "--first-line", "--trials", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [
        line for line in done.stdout.splitlines() if line.startswith("| ") and " ms " not in line
    ]
    assert [row.split(" | ")[0][2:] for row in rows] == [
        "bare (two workers spawned directly)",
        "python parent, spawn only",
        "+ import attrs",
        "+ the agent machine stepped to StartWorkers",
        "tpelastic run --standalone",
    ]
