"""Several agents on one machine (127.0.0.1, tcp backend): one world, scale-up, scale-down."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from e2e_helpers import WORKER, finish, free_port, records, tpstart, wait_for_records
from e2e_helpers import tcp_node as node

pytestmark = pytest.mark.slow


def test_two_agents_form_one_world_with_consistent_global_ranks(tmp_path: Path, out: Path) -> None:
    port = free_port()
    a = node(port, "one-world", "2", tmp_path / "a.log", "--out", str(out))
    b = node(port, "one-world", "2", tmp_path / "b.log", "--out", str(out))
    assert finish(a, tmp_path / "a.log") == 0, (tmp_path / "a.log").read_text()
    assert finish(b, tmp_path / "b.log") == 0, (tmp_path / "b.log").read_text()
    seen = records(out)
    assert sorted(r["rank"] for r in seen) == [0, 1, 2, 3]
    assert all(r["sum"] == 10.0 and r["world"] == 4 for r in seen)
    for rec in seen:  # node g owns global ranks 2g and 2g+1
        env = rec["env"]
        assert rec["rank"] == 2 * int(env["GROUP_RANK"]) + int(env["LOCAL_RANK"])
        assert env["GROUP_WORLD_SIZE"] == "2"
    assert len({r["env"]["MASTER_PORT"] for r in seen}) == 1
    # Rank 0's agent hosted the gloo group's store (ours, with tensorplay's client in workers).
    assert {r["env"]["TORCHELASTIC_USE_AGENT_STORE"] for r in seen} == {"True"}


def test_scale_up_restarts_the_running_group_once_without_spending_budget(
    tmp_path: Path, out: Path
) -> None:
    port = free_port()
    a = node(port, "grow", "1:2", tmp_path / "a.log", "--out", str(out), "--hold-unless-world", "4")
    wait_for_records(out, 2)  # A trains alone (world 2) and holds until the world grows
    b = node(port, "grow", "1:2", tmp_path / "b.log", "--out", str(out), "--hold-unless-world", "4")
    assert finish(a, tmp_path / "a.log") == 0, (tmp_path / "a.log").read_text()
    assert finish(b, tmp_path / "b.log") == 0, (tmp_path / "b.log").read_text()
    seen = records(out)
    assert sorted(r["world"] for r in seen) == [2, 2, 4, 4, 4, 4]  # A restarted exactly once
    assert {r["env"]["TPELASTIC_RESTART_COUNT"] for r in seen} == {"0"}  # no budget spent
    assert all(r["sum"] == (3.0 if r["world"] == 2 else 10.0) for r in seen)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_scale_down_survivors_continue_when_a_node_dies_or_leaves(
    sig: signal.Signals, tmp_path: Path, out: Path
) -> None:
    port = free_port()
    # A hosts the store (is_host); B goes away while the world of 4 holds.
    hold = ("--out", str(out), "--hold-unless-world", "2")
    a = node(port, "shrink", "1:2", tmp_path / "a.log", *hold, conf=",is_host=1")
    b = node(port, "shrink", "1:2", tmp_path / "b.log", *hold, conf=",is_host=0")
    wait_for_records(out, 4)
    b.send_signal(sig)
    expected = -sig if sig == signal.SIGKILL else 128 + sig  # SIGTERM: a graceful leave
    assert finish(b, tmp_path / "b.log") == expected, (tmp_path / "b.log").read_text()
    assert finish(a, tmp_path / "a.log") == 0, (tmp_path / "a.log").read_text()
    worlds = [r["world"] for r in records(out)]
    assert worlds.count(4) == 4 and worlds.count(2) >= 2  # the survivors re-formed a world of 2


def test_below_min_nodes_the_join_times_out_with_exit_3(tmp_path: Path, out: Path) -> None:
    port = free_port()
    started = time.monotonic()
    proc = tpstart(
        "--nnodes",
        "2",
        "--nproc-per-node",
        "1",
        "--rdzv-backend",
        "tcp",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        "alone",
        "--rdzv-timeout",
        "2",
        WORKER,
        "--out",
        str(out),
        log=tmp_path / "a.log",
    )
    assert finish(proc, tmp_path / "a.log", timeout=30) == 3, (tmp_path / "a.log").read_text()
    assert time.monotonic() - started < 20
    assert records(out) == []


def test_a_worker_crash_restarts_every_node_once_with_one_restart_count(
    tmp_path: Path, out: Path
) -> None:
    port = free_port()
    crash = ("--out", str(out), "--crash-until", "1")  # global rank 0 dies in attempt 0
    a = node(port, "crash", "2", tmp_path / "a.log", *crash, restarts=1)
    b = node(port, "crash", "2", tmp_path / "b.log", *crash, restarts=1)
    assert finish(a, tmp_path / "a.log") == 0, (tmp_path / "a.log").read_text()
    assert finish(b, tmp_path / "b.log") == 0, (tmp_path / "b.log").read_text()
    seen = records(out)
    counts = sorted(r["env"]["TPELASTIC_RESTART_COUNT"] for r in seen)
    assert counts == ["0"] * 4 + ["1"] * 4  # one restart, seen by all four workers
    assert all(r["sum"] == 10.0 for r in seen)
    # Nobody joined or left: the round restarted in place as its attempt 1 (no second round).
    assert {r["env"]["TPELASTIC_ROUND"] for r in seen} == {"0"}
    assert all(r["env"]["TPELASTIC_ATTEMPT"] == r["env"]["TPELASTIC_RESTART_COUNT"] for r in seen)
