"""The chaos harness' per-fault timeline on hand-written agent logs and worker lines."""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from chaos import checks, timeline

# Agent stamps are local wall time; t=0 on the harness' clock is this wall time.
WALL0 = datetime.datetime(2026, 12, 1, 13, 0, 0)


def stamp(t: float) -> str:
    return (WALL0 + datetime.timedelta(seconds=t)).isoformat(timespec="milliseconds")


def write_episode(folder: Path) -> None:
    (folder / "nodes").mkdir()
    (folder / "lines").mkdir()
    agents = {
        "n0": [
            (10.2, "worker rank 1 failed: Signal 9 (SIGKILL) received by PID 7"),
            (10.3, "round 0: restarting in place as attempt 1 (worker local rank 1 failed)"),
            (10.5, "round 0 attempt 1: node 0 of 2, restart 1/3, starting 2 worker(s), master x"),
        ],
        "n1": [
            (10.4, "stopping workers: round 0 attempt 1 opened: worker local rank 1 failed"),
            (10.6, "round 0 attempt 1: node 1 of 2, restart 1/3, starting 2 worker(s), master x"),
        ],
    }
    for node, said in agents.items():
        text = "".join(f"{stamp(t)} [tpelastic] {msg}\n" for t, msg in said)
        (folder / "nodes" / f"{node}.log").write_text("Traceback (not stamped)\n" + text)
    for rank in range(4):
        node = f"n{rank // 2}"
        old = [f"START t=0.{rank} node={node} pid={rank} restart=0"]
        old.append(f"RESUME t=1.0 world=a size=4 rank={rank} step=0")
        old += [f"STEP t={t}.0 world=a size=4 rank={rank} node={node} step={t}" for t in (2, 9)]
        (folder / "lines" / f"{node}_pid{rank}.log").write_text("\n".join(old) + "\n")
        new = [f"START t={10.7 + rank * 0.1:.1f} node={node} pid={10 + rank} restart=1"]
        new.append(f"IMPORTED t={11.5 + rank * 0.1:.1f} node={node} pid={10 + rank}")
        new.append(f"RESUME t={12.0 + rank * 0.1:.1f} world=b size=4 rank={rank} step=5")
        new.append(f"STEP t={12.5 + rank * 0.01:.2f} world=b size=4 rank={rank} node={node} step=6")
        (folder / "lines" / f"{node}_pid{10 + rank}.log").write_text("\n".join(new) + "\n")


def test_a_worker_kill_is_cut_into_the_phases_that_add_up_to_its_recovery(tmp_path: Path) -> None:
    write_episode(tmp_path)
    wall_minus_mono = WALL0.timestamp()  # monotonic 0 is WALL0
    agents = timeline.agent_lines(tmp_path / "nodes", wall_minus_mono)
    assert [a["node"] for a in agents] == ["n0", "n0", "n1", "n0", "n1"]
    lines = checks.read_lines(tmp_path / "lines")
    fault = {"fault": "kill-worker", "t": 10.0, "node": "n0"}
    [mark] = timeline.timelines(lines, [fault], checks.worlds(lines), agents)
    assert mark["world"] == "b" and not mark["overlapped"]
    assert mark["phases"] == {
        "observed": 0.2,  # n0 saw its worker fail
        "opened": 0.1,  # n0 opened the attempt
        "formed": 0.3,  # n1, the last agent, starts its workers at 10.6
        "spawned": 0.4,  # the last worker started at 11.0
        "imported": 0.8,  # the last one had imported tensorplay at 11.8
        "joined": 0.5,  # the last rank had its group at 12.3
        "stepping": 0.23,  # every rank stepped by 12.53
    }
    took, _ = checks.recovery(checks.worlds(lines), 10.0, float("inf"))
    assert took is not None and abs(sum(mark["phases"].values()) - took) < 1e-6
    assert mark["held"] == 0.0  # world a's last step (9.0) came before the fault
    assert not mark["through"]


def test_missing_marks_are_none_and_the_breakdown_leaves_overlapped_faults_out(
    tmp_path: Path,
) -> None:
    write_episode(tmp_path)
    lines = checks.read_lines(tmp_path / "lines")
    fault = {"fault": "kill-worker", "t": 10.0, "node": "n0"}
    [mark] = timeline.timelines(lines, [fault], checks.worlds(lines), agents=[])
    assert mark["phases"]["observed"] is None and mark["phases"]["formed"] is None
    assert mark["phases"]["spawned"] == 1.0  # measured from the fault: nothing in between
    overlapped = {**mark, "overlapped": True, "phases": dict.fromkeys(mark["phases"], 99.0)}
    table = timeline.breakdown([{"timeline": [mark, overlapped]}], ("kill-worker", "kill-node"))
    assert set(table) == {"kill-worker"}
    assert table["kill-worker"]["n"] == 1 and table["kill-worker"]["spawned"] == 1.0
    assert "| kill-worker (1) | - | - | - | 1 (1) | 0.8 (1) | 0.5 (1) | 0.23 (1) | 0 (1) | 0 |" in (
        timeline.table({"x": table})
    )


def test_a_fault_the_world_trains_through_is_all_stepping(tmp_path: Path) -> None:
    write_episode(tmp_path)
    lines = checks.read_lines(tmp_path / "lines")
    pause = {"fault": "stop-host", "t": 5.0, "node": "n0"}
    kill = {"fault": "kill-worker", "t": 10.0, "node": "n0"}
    marks = timeline.timelines(lines, [pause, kill], checks.worlds(lines), agents=[])
    assert marks[0]["world"] == "a" and marks[0]["through"] and marks[0]["held"] is None
    assert marks[0]["phases"]["stepping"] == 4.0  # world a's next step, at 9.0
    assert marks[1]["world"] == "b" and not marks[1]["through"]


def test_an_episode_is_judged_again_from_what_it_left_on_disk(tmp_path: Path) -> None:
    from chaos import rejudge

    write_episode(tmp_path)
    t0 = 1.0  # the recorded times are relative to it
    recorded = {
        "launcher": "tpelastic",
        "seed": 7,
        "t0": t0,
        "wall_minus_mono": WALL0.timestamp(),
        "faults": [{"fault": "kill-worker", "t": 10.0 - t0, "node": "n0", "pid": 1}],
        "events": [{"t": 13.0 - t0, "kind": "exit", "node": "n0"}],
        "nodes": [{"name": "n0", "code": 0, "signalled": ""}],
        "hung_nodes": [],
        "orphans": [],
        "recoveries": [],  # what an older harness said: replaced
    }
    (tmp_path / "result.json").write_text(json.dumps(recorded))
    again = rejudge.rejudge_episode(tmp_path, max_restarts=3)
    assert again["seed"] == 7 and again["launcher"] == "tpelastic"
    assert again["recoveries"] == [
        {"fault": "kill-worker", "recovery": 2.53, "overlapped": False, "ended_job": False}
    ]  # world b stepped on every rank by 12.53
    assert again["timeline"][0]["phases"]["observed"] == 0.2
    assert json.loads((tmp_path / "result.json").read_text())["recoveries"] == again["recoveries"]
