"""Restarting a round in place with real agents (tcp backend, our TCPStore, 127.0.0.1): a worker
failure restarts every node's workers as the round's next attempt (same round, same ranks, a
fresh bootstrap port, one restart count everywhere, gloo working again); the budget still allows
exactly max_restarts + 1 attempts; a node crash and a waiting node still re-form the round, and
the new round's restart count keeps the units the attempts spent."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import finish, free_port, records, tcp_node, wait_for_records

from tpelastic.events import RdzvEvent, read_json_lines, replay_agent_events

pytestmark = pytest.mark.slow


def _env(rec: dict[str, Any], name: str) -> int:
    return int(rec["env"][name])


def test_a_worker_failure_restarts_both_nodes_in_place(tmp_path: Path, out: Path) -> None:
    port, events = free_port(), tmp_path / "events.jsonl"
    crash = ("--out", str(out), "--crash-until", "1")  # global rank 0 dies in attempt 0
    flags = ("--events-file", str(events))
    a = tcp_node(port, "in-place", "2", tmp_path / "a.log", *crash, restarts=1, extra=flags)
    b = tcp_node(port, "in-place", "2", tmp_path / "b.log", *crash, restarts=1, extra=flags)
    assert finish(a, tmp_path / "a.log") == 0, (tmp_path / "a.log").read_text()
    assert finish(b, tmp_path / "b.log") == 0, (tmp_path / "b.log").read_text()
    seen = records(out)
    assert len(seen) == 8
    assert {r["round"] for r in seen} == {0}  # no new round: the same world restarted
    by_attempt: dict[int, list[dict[str, Any]]] = {}
    for rec in seen:
        by_attempt.setdefault(_env(rec, "TPELASTIC_ATTEMPT"), []).append(rec)
    assert sorted(by_attempt) == [0, 1]
    ports = set()
    for attempt, recs in by_attempt.items():
        assert sorted(r["rank"] for r in recs) == [0, 1, 2, 3], attempt  # same global ranks
        assert {_env(r, "TORCHELASTIC_RESTART_COUNT") for r in recs} == {attempt}
        assert {_env(r, "TPELASTIC_RESTART_COUNT") for r in recs} == {attempt}
        assert all(r["sum"] == 10.0 for r in recs)  # gloo all_reduce across both nodes
        (master,) = {r["env"]["MASTER_PORT"] for r in recs}
        ports.add(master)
    assert len(ports) == 2  # each attempt bootstraps on a fresh port
    logged = (tmp_path / "a.log").read_text() + (tmp_path / "b.log").read_text()
    assert "restarting in place as attempt 1" in logged
    recorded = list(read_json_lines(events))
    replayed = replay_agent_events(recorded)  # both agents' steps replay through the core
    assert len(replayed) == 2
    assert {(r.state.round, r.state.attempt, r.state.restart_count) for r in replayed.values()} == {
        (0, 1, 1)
    }
    attempts = [e for e in recorded if isinstance(e, RdzvEvent) and e.name == "rdzv.attempt"]
    assert len(attempts) == 2 and {e.round for e in attempts} == {0}  # one per node


def test_budget_exhaustion_in_place_makes_exactly_max_restarts_plus_one_attempts(
    tmp_path: Path, out: Path
) -> None:
    port = free_port()
    fail = ("--out", str(out), "--fail-always")  # global rank 1 (node rank 0) always fails
    procs = [
        tcp_node(
            port,
            "budget",
            "2",
            tmp_path / f"{n}.log",
            *fail,
            restarts=2,
            extra=("--log-dir", str(tmp_path / f"logs-{n}")),
        )
        for n in ("a", "b")
    ]
    codes = [finish(p, tmp_path / f"{n}.log") for p, n in zip(procs, "ab", strict=True)]
    assert codes == [1, 1], [(tmp_path / f"{n}.log").read_text()[-2000:] for n in "ab"]
    for n in "ab":  # every node ran attempts 0, 1 and 2 of round 0, and no other
        dirs = sorted(p.name for p in (tmp_path / f"logs-{n}").glob("*/attempt_*"))
        assert len(dirs) == 3, dirs
    logged = (tmp_path / "a.log").read_text() + (tmp_path / "b.log").read_text()
    assert "rank 1 broke on purpose (restart 2)" in logged
    assert "rank 1 broke on purpose (restart 3)" not in logged


def test_a_node_crash_after_an_in_place_restart_still_reforms_the_round(
    tmp_path: Path, out: Path
) -> None:
    port = free_port()
    # Attempt 0 crashes (global rank 0); attempt 1 holds in a world of 4 until B is killed.
    args = ("--out", str(out), "--crash-until", "1", "--hold-unless-world", "2")
    a = tcp_node(port, "shrink", "1:2", tmp_path / "a.log", *args, restarts=1, conf=",is_host=1")
    b = tcp_node(port, "shrink", "1:2", tmp_path / "b.log", *args, restarts=1, conf=",is_host=0")
    wait_for_records(out, 8)  # attempts 0 and 1 of round 0, four workers each
    b.send_signal(signal.SIGKILL)
    assert finish(b, tmp_path / "b.log") == -signal.SIGKILL
    assert finish(a, tmp_path / "a.log") == 0, (tmp_path / "a.log").read_text()
    later = [r for r in records(out) if r["round"] > 0]
    assert later and {r["world"] for r in later} == {2}  # the survivor re-formed a world of 2
    assert {_env(r, "TPELASTIC_ATTEMPT") for r in later} == {0}
    # The attempt's unit stays spent: the new round's count is the attempt's, not the round's.
    assert {_env(r, "TORCHELASTIC_RESTART_COUNT") for r in later} == {1}


def test_a_waiting_node_scales_up_a_world_that_restarted_in_place(
    tmp_path: Path, out: Path
) -> None:
    port = free_port()
    # A alone: attempt 0 crashes, attempt 1 holds until the world grows to 4 workers.
    args = ("--out", str(out), "--crash-until", "1", "--hold-unless-world", "4")
    a = tcp_node(port, "grow", "1:2", tmp_path / "a.log", *args, restarts=1)
    wait_for_records(out, 4)  # two workers in attempt 0, two in attempt 1
    b = tcp_node(port, "grow", "1:2", tmp_path / "b.log", *args, restarts=1)
    assert finish(a, tmp_path / "a.log") == 0, (tmp_path / "a.log").read_text()
    assert finish(b, tmp_path / "b.log") == 0, (tmp_path / "b.log").read_text()
    seen = records(out)
    alone = [r for r in seen if r["world"] == 2]
    grown = [r for r in seen if r["world"] == 4]
    assert {(r["round"], _env(r, "TPELASTIC_ATTEMPT")) for r in alone} == {(0, 0), (0, 1)}
    assert len(grown) == 4 and {r["round"] for r in grown} == {1}  # exactly one scale-up
    assert {_env(r, "TORCHELASTIC_RESTART_COUNT") for r in grown} == {1}  # none spent by it
    assert all(r["sum"] == 10.0 for r in grown)
