"""Availability with real agents on 127.0.0.1 (tcp backend): a paused agent re-joins instead of
ending the job (specs/agent.md, A12), and its workers' failure on resuming is no budget unit; a
paused store host pauses the store with it, so its world trains on; a worker failure caused by a
peer's loss is a membership change, not a budget unit, with the budget spent (A13) or left
(A15)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import machine_load
import psutil
import pytest
from e2e_helpers import (
    FAST,
    descendants,
    fast_detection,
    finish,
    free_port,
    records,
    wait_for_records,
)
from e2e_helpers import tcp_node as node

pytestmark = pytest.mark.slow


def _pause(pid: int, seconds: float) -> None:
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)


def _kill_node(agent: subprocess.Popen[bytes]) -> None:
    """SIGKILL an agent and its workers at once, as a lost machine."""
    for proc in [*descendants(agent.pid), psutil.Process(agent.pid)]:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    agent.wait(timeout=10)


@pytest.mark.parametrize("paused", ["peer", "store_host"])
def test_a_paused_agent_rejoins_and_the_job_finishes(
    paused: str, tmp_path: Path, out: Path
) -> None:
    port = free_port()
    # Keep-alive 0.3 s x 3 (e2e_helpers.fast_detection): a pause this long lets the paused
    # node's keep-alive lapse and its peers find it dead. Both stretch with the load, so that
    # after a paused store host resumes, its heartbeat is not judged late.
    load = machine_load.factor()
    detection, pause = fast_detection(load), (0.3 * 3 + 1.5) * load
    work = ("--out", str(out), "--hold", "6")
    a = node(
        port, "pause", "1:2", tmp_path / "a.log", *work, conf=",is_host=1", detection=detection
    )
    b = node(
        port, "pause", "1:2", tmp_path / "b.log", *work, conf=",is_host=0", detection=detection
    )
    wait_for_records(out, 4)
    _pause((a if paused == "store_host" else b).pid, pause)
    assert finish(a, tmp_path / "a.log") == 0, (tmp_path / "a.log").read_text()
    assert finish(b, tmp_path / "b.log") == 0, (tmp_path / "b.log").read_text()
    rounds = {r["round"] for r in records(out)}
    if paused == "store_host":
        # Nobody could read or beat while the store was paused: no one is dead, nothing fenced.
        assert rounds == {0}, rounds
    else:
        assert len(rounds) >= 2, rounds  # the peer was found dead: a new round trained
    counts = {r["env"]["TPELASTIC_RESTART_COUNT"] for r in records(out)}
    assert counts == {"0"}, records(out)  # a pause is no failure of the job's
    for log in ("a.log", "b.log"):
        assert "job failed" not in (tmp_path / log).read_text()


def test_A13_losing_a_node_after_the_budget_is_spent_is_a_membership_change(
    tmp_path: Path, out: Path
) -> None:
    """One worker crash spends the whole budget (max_restarts 1); then node B dies with its
    workers. A's workers fail on the lost peer: that is a membership change, not a second
    unit, so A re-forms a world alone and finishes."""
    port = free_port()
    work = ("--out", str(out), "--crash-until", "1", "--train-for", "4")
    a = node(port, "lose", "1:2", tmp_path / "a.log", *work, restarts=1, conf=",is_host=1")
    b = node(port, "lose", "1:2", tmp_path / "b.log", *work, restarts=1, conf=",is_host=0")
    # Attempt 0 records 4 workers, then global rank 0 crashes; attempt 1 records 4 more.
    wait_for_records(out, 8)
    time.sleep(0.5)  # attempt 1 is training (all_reducing)
    _kill_node(b)
    assert finish(a, tmp_path / "a.log") == 0, (tmp_path / "a.log").read_text()
    alone = [r for r in records(out) if r["world"] == 2]
    assert len(alone) == 2, records(out)  # A's two workers trained in a world of their own
    assert {r["env"]["TPELASTIC_RESTART_COUNT"] for r in alone} == {"1"}  # no unit spent


def test_A15_a_node_lost_with_budget_left_spends_nothing(tmp_path: Path, out: Path) -> None:
    """Budget left (max_restarts 1); node B dies with its workers while both train. A's workers
    fail on the lost peer and A restarts them in place at once (attempt 1), before B's death is
    reported; the report, within the collateral window, refunds that attempt: A re-forms a
    world alone with the restart count unchanged, and the budget is still there."""
    port = free_port()
    work = ("--out", str(out), "--train-for", "6")
    # B's death is reported ~6 s after it (3 missed 2 s heartbeats): A's workers fail on the
    # lost peer well before that, and the report lands within the 10.5 s collateral window.
    slow = FAST.replace("keep_alive_interval=0.3", "keep_alive_interval=2")

    def start(name: str, host: int) -> subprocess.Popen[bytes]:
        log, conf = tmp_path / f"{name}.log", f",is_host={host}"
        return node(port, "spare", "1:2", log, *work, restarts=1, conf=conf, detection=slow)

    a, b = start("a", 1), start("b", 0)
    wait_for_records(out, 4)
    time.sleep(0.5)  # attempt 0 is training (all_reducing)
    _kill_node(b)
    log = tmp_path / "a.log"
    assert finish(a, log) == 0, log.read_text()
    text = log.read_text()
    assert "restarting in place as attempt 1" in text, text  # the collateral failure restarted
    assert "not charged" in text, text
    alone = [r for r in records(out) if r["world"] == 2]
    assert len(alone) == 2, records(out)  # A's two workers trained in a world of their own
    assert {r["env"]["TPELASTIC_RESTART_COUNT"] for r in alone} == {"0"}  # no unit spent
