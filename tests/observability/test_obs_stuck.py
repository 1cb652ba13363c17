"""The stuck rank is named: real gloo jobs where one rank sleeps while the others wait in an
all_reduce, on one node and across two; the collective hook in a real worker; and the status
view's stuck rank and stragglers from plain records."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from obs_helpers import REPO, fast_detection, free_port

from tpelastic.adapters.boot import BOOT_DIR
from tpelastic.adapters.status import stragglers, stuck_rank

pytest.importorskip("tensorplay.distributed")
HANG = str(Path(__file__).resolve().parent / "scripts" / "hang_worker.py")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TPELASTIC_", "PET_"))}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["TPELASTIC_STATUS_INTERVAL"] = "0.3"
    return env


def _run(*args: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "tpelastic", "run", "--stall-timeout", "4", *args, HANG]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env()
    )


def _stuck_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if "is stuck" in line]


def test_one_node_names_the_sleeping_rank_not_the_waiting_one() -> None:
    out, _ = _run("--standalone", "--nproc-per-node", "2").communicate(timeout=120)
    [line] = _stuck_lines(out)
    assert "local rank 1 (rank 1) is stuck" in line, out
    assert "job failed (exit code 1): worker local rank 1 failed" in out


def test_across_two_nodes_the_waiting_node_names_the_peer_that_never_came() -> None:
    port = free_port()
    common = [
        "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "tcp",
        "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "stuck-two",
        "--local-addr", "127.0.0.1", "--rdzv-conf", fast_detection(0.5, "join_timeout=60"),
    ]  # fmt: skip
    nodes = [_run(*common) for _ in range(2)]
    outs = [proc.communicate(timeout=150)[0] for proc in nodes]
    lines = [line for out in outs for line in _stuck_lines(out)]
    assert lines, outs
    for line in lines:  # the waiting rank 0 is never the one blamed
        named_itself = "(rank 1) is stuck" in line
        assert named_itself or "waits for rank 1 (node 1, " in line, line
    waiting = [line for line in lines if "(rank 0) is stuck" in line]
    for line in waiting:
        assert "waiting in all_reduce" in line and "never reached all_reduce #4" in line


def test_the_hook_wraps_tensorplay_collectives_in_a_plain_worker(tmp_path: Path) -> None:
    code = (
        "import tensorplay.distributed as d\n"
        "from tensorplay.distributed import barrier\n"
        "print(getattr(d.all_reduce, '__tpelastic_collective__', False),"
        " getattr(barrier, '__tpelastic_collective__', False))\n"
    )
    env = {**_env(), "PYTHONPATH": BOOT_DIR + os.pathsep + _env()["PYTHONPATH"]}
    hooked = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True, text=True, timeout=60,
        env={**env, "TPELASTIC_COLLECTIVES": "1", "TPELASTIC_PROGRESS_FILE": str(tmp_path / "p")},
    )  # fmt: skip
    assert hooked.stdout.split() == ["True", "True"], hooked.stderr
    plain = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert plain.stdout.split() == ["False", "False"], plain.stderr


def rank(r, collectives, waiting, age=20.0, step_time=0.1, node="n"):
    return {
        "rank": r, "node": node, "host": "h", "node_rank": r, "collectives": collectives,
        "waiting": waiting, "collective": "all_reduce" if waiting else "", "age_s": age,
        "step": 3, "step_time_s": step_time,
    }  # fmt: skip


def test_view_names_the_rank_behind_and_the_stragglers() -> None:
    found = stuck_rank([rank(0, 4, True), rank(1, 3, False), rank(2, 4, True)])
    assert found is not None
    assert (found["rank"], found["collective_number"], found["waiting_ranks"]) == (1, 4, [0, 2])
    assert stuck_rank([rank(0, 4, True, age=1.0), rank(1, 3, False)]) is None  # ordinary skew
    assert stuck_rank([rank(0, 4, True), rank(1, 4, True)]) is None  # nobody behind
    slow = stragglers([rank(0, 1, False), rank(1, 1, False, step_time=0.5), rank(2, 1, False)])
    assert [(s["rank"], s["ratio"]) for s in slow] == [(1, 5.0)]
    assert stragglers([rank(0, 1, False)]) == []


def test_a_slow_rank_is_logged_as_a_straggler() -> None:
    slow = str(Path(__file__).resolve().parent / "scripts" / "slow_rank.py")
    cmd = [
        sys.executable, "-m", "tpelastic", "run", "--standalone", "--nproc-per-node", "3",
        "--stall-timeout", "60", slow,
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=_env())
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "is a straggler" in line]
    assert len(lines) == 1, done.stderr  # once per rank and attempt
    assert "rank 2 is a straggler: its last step took" in lines[0]
