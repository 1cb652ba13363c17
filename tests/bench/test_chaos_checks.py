"""The chaos harness' checks on hand-written worker lines: each one must be able to fail."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from chaos import checks, report
from chaos.schedule import KINDS, OWN, plan


def steps(world: str, size: int, times: list[float], first_step: int = 1) -> list[str]:
    out = [f"RESUME t={times[0] - 0.5} world={world} size={size} rank=0 step={first_step - 1}"]
    for i, t in enumerate(times):
        for rank in range(size):
            out.append(
                f"STEP t={t + rank * 0.01:.3f} world={world} size={size} rank={rank} node=n0 "
                f"restart=0 step={first_step + i}"
            )
    return out


def judged(tmp_path: Path, lines: list[str], faults=(), nodes=None, orphans=(), **kw):
    (tmp_path / "n0_pid1.log").write_text("\n".join(lines) + "\n")
    return checks.judge(
        lines=checks.read_lines(tmp_path),
        injected=list(faults),
        nodes=nodes or [{"name": "n0", "code": 0, "signalled": "", "exited": 99, "started": 0}],
        hung=kw.get("hung", []),
        orphans=list(orphans),
        warm=True,
        max_restarts=3,
        budget_scope="job",
        own=OWN,
    )


def test_one_world_after_another_passes_and_recovery_is_to_every_rank_stepping(tmp_path):
    lines = [
        "START t=0.0 node=n0 pid=1 restart=0",
        *steps("a", 2, [1.0, 2.0, 3.0]),
        "START t=3.5 node=n0 pid=2 restart=1",
        *steps("b", 2, [5.0, 6.0], first_step=3),
        "DONE t=6.5 step=4",
    ]
    fault = {"fault": "kill-worker", "t": 3.2, "node": "n0"}
    result = judged(tmp_path, lines, faults=[fault])
    assert result["passed"], result
    assert result["outcome"] == "finished"
    assert result["recoveries"][0]["recovery"] == 1.81  # rank 1 steps at 5.01


def test_two_worlds_stepping_at_once_are_split_brain(tmp_path):
    lines = [*steps("a", 2, [1.0, 2.0, 3.0]), *steps("b", 2, [2.5, 3.5]), "DONE t=4 step=3"]
    result = judged(tmp_path, lines)
    assert result["split_brain"] == [("a", "b")]
    assert not result["checks"]["one_world"] and not result["passed"]


def test_a_restart_without_an_own_fault_is_collateral_charged(tmp_path):
    lines = [
        "START t=0.0 node=n0 pid=1 restart=0",
        *steps("a", 2, [1.0, 2.0]),
        "START t=3.5 node=n0 pid=2 restart=1",
        *steps("b", 2, [5.0], first_step=3),
        "DONE t=6 step=3",
    ]
    result = judged(tmp_path, lines, faults=[{"fault": "kill-node", "t": 2.5, "node": "n1"}])
    assert result["budget"] == [{"scope": "job", "charged": 1, "own": 0}]
    assert not result["checks"]["budget"]


def test_a_unit_refunded_after_a_peers_loss_is_not_charged(tmp_path):
    lines = [
        "START t=0.0 node=n0 pid=1 restart=0",
        *steps("a", 2, [1.0, 2.0]),
        "START t=2.6 node=n0 pid=2 restart=1",  # an in-place attempt, before the peer is found
        "START t=3.5 node=n0 pid=3 restart=0",  # the next round: its loss refunded the unit
        *steps("b", 2, [5.0], first_step=3),
        "DONE t=6 step=3",
    ]
    result = judged(tmp_path, lines, faults=[{"fault": "kill-node", "t": 2.5, "node": "n1"}])
    assert result["budget"] == [{"scope": "job", "charged": 0, "own": 0}]
    assert result["checks"]["budget"]


def test_no_step_after_a_fault_is_no_progress_and_a_node_giving_up_is_flagged(tmp_path):
    lines = [*steps("a", 2, [1.0, 2.0])]
    nodes = [{"name": "n0", "code": 3, "signalled": "", "exited": 4.0, "started": 0}]
    fault = {"fault": "stop-agent", "t": 2.5, "node": "n0"}
    result = judged(tmp_path, lines, faults=[fault], nodes=nodes)
    assert result["outcome"] == "failed"
    assert result["stalled_after"] == ["stop-agent"]
    assert result["gave_up_with_budget_left"] == ["n0"]
    assert result["recoveries"][0]["recovery"] is None


def test_a_never_ranks_above_every_recovery_but_the_fault_that_spent_the_budget_is_not_due(
    tmp_path,
):
    lines = [
        "START t=0.0 node=n0 pid=1 restart=0",
        *steps("a", 2, [1.0, 2.0]),
        "START t=2.5 node=n0 pid=2 restart=1",
        *steps("b", 2, [3.0, 4.0], first_step=3),
    ]
    kills = [{"fault": "kill-worker", "t": t, "node": "n0"} for t in (2.2, 4.2, 4.4, 4.6)]
    result = judged(tmp_path, lines, faults=kills)
    assert result["outcome"] == "failed-clean"
    assert [r["ended_job"] for r in result["recoveries"]] == [False, False, False, True]
    summary = report.summarize([result])["recovery"]["kill-worker"]
    # 0.8 s, then two nevers that were due: the median is a never, not the one time there is
    assert (summary["n"], summary["not_recovered"]) == (1, 2)
    assert summary["median"] == "never" and summary["median_recovered"] == 0.81
    assert "never / never (n=1), 2 never" in report.table({"x": report.summarize([result])})


def test_a_world_torn_down_after_training_through_a_pause_did_not_settle_it(tmp_path):
    # World a trains through a SIGSTOP at 3.4 until 8.1, is torn down, and the job trains
    # again only in c at 18.85, after the next fault at 12.87: no recovery before that.
    lines = [*steps("a", 2, [1.0, 2.0, 3.0, 3.5, 8.1]), *steps("c", 2, [18.85], first_step=6)]
    faults = [
        {"fault": "stop-host", "t": 3.4, "node": "n0"},
        {"fault": "stop-host", "t": 12.87, "node": "n0"},
    ]
    result = judged(tmp_path, [*lines, "DONE t=19 step=6"], faults=faults)
    first = result["recoveries"][0]
    assert first["overlapped"] and first["recovery"] == pytest.approx(18.86 - 3.4, abs=1e-3)
    # A world that trains on past the next fault did settle it: trained through.
    lines = [*steps("a", 2, [1.0, 2.0, 3.0, 3.5, 8.1, 13.0]), *steps("c", 2, [18.85], 7)]
    result = judged(tmp_path, [*lines, "DONE t=19 step=7"], faults=faults)
    assert result["recoveries"][0] == {
        "fault": "stop-host",
        "recovery": 0.11,  # rank 1 steps at 3.51
        "overlapped": False,
        "ended_job": False,
    }


def test_resuming_behind_the_newest_checkpoint_and_orphans_fail(tmp_path):
    lines = [*steps("a", 2, [1.0, 2.0]), "CKPT t=2.1 step=2", *steps("b", 2, [4.0], first_step=1)]
    result = judged(tmp_path, [*lines, "DONE t=5 step=1"], orphans=[{"pid": 7}])
    assert result["bad_resume"] == [{"world": "b", "resumed": 0, "newest": 2}]
    assert not result["checks"]["no_orphans"] and not result["checks"]["progress"]


def test_the_plan_is_seeded_and_keeps_a_node_up():
    assert plan(5, duration=60) == plan(5, duration=60)
    assert plan(5, duration=60) != plan(6, duration=60)
    for seed in range(50):
        alive = 3
        for fault in plan(seed, duration=60, kinds=KINDS):
            alive += {"kill-node": -1, "term-agent": -1, "new-node": 1}.get(fault.kind, 0)
            assert 1 <= alive <= 3


LEAVES_A_CHILD = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                         start_new_session=True)
print("child", child.pid, flush=True)
sys.exit(1)
"""


def test_the_sweep_finds_a_process_left_behind_in_a_session_of_its_own(tmp_path, monkeypatch):
    # A stand-in launcher (a real process) that exits and leaves a child re-parented away from
    # it: only the environment token can still tie the child to the episode.
    import psutil
    from chaos.episode import Episode, Launcher, Settings

    (tmp_path / "mod").mkdir()
    (tmp_path / "mod" / "leaves_a_child.py").write_text(LEAVES_A_CHILD)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "mod"))
    launcher = Launcher("leaves-a-child", "leaves_a_child", "tensorplay", "job")
    settings = Settings(nodes=1, duration=5, warm_timeout=20, exit_grace=1.0)
    result = Episode(launcher, 1, [], settings, tmp_path / "episode").run()
    assert result["outcome"] == "no-start"
    assert len(result["orphans"]) == 1 and "time.sleep(120)" in result["orphans"][0]["cmd"]
    assert not result["checks"]["no_orphans"]
    assert not psutil.pid_exists(result["orphans"][0]["pid"])  # and the harness ended it


def test_steps_a_killed_node_logged_on_the_signals_way_are_no_recovery(tmp_path):
    def world(name: str, nodes: list[str], times: list[float]) -> list[str]:
        out = []
        for t in times:
            for rank, node in enumerate(nodes):
                out.append(
                    f"STEP t={t + rank * 0.001:.3f} world={name} size={len(nodes)} rank={rank} "
                    f"node={node} restart=0 step={int(t * 10)}"
                )
        return out

    # Every rank of world a, n1's too, logs a step 5 ms after n1 was killed; world b, n0's,
    # trains only after the next fault (at 3.0).
    lines = [*world("a", ["n0", "n1"], [1.0, 2.005]), *world("b", ["n0"], [4.0, 5.0])]
    lines.append("DONE t=5.5 step=50")
    (tmp_path / "n0_pid1.log").write_text("\n".join(lines) + "\n")
    fault = {"fault": "kill-node", "t": 2.0, "node": "n1"}
    found = checks.worlds(checks.read_lines(tmp_path))
    assert checks.recovery(found, 2.0, 3.0)[0] == pytest.approx(0.006)  # the old world
    took, overlapped = checks.recovery(found, 2.0, 3.0, lost=checks.ended_by(fault))
    assert took == pytest.approx(2.0) and overlapped  # world b, n0 alone, steps at 4.0
