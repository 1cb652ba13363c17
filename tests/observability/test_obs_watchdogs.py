"""Timers and hang detection in a real agent: the late or stuck worker is named, the group
restarts within the budget, and the job ends as the budget says."""

from __future__ import annotations

from pathlib import Path

from obs_helpers import WORKER, tprun

from tpelastic.events import Event, read_json_lines, replay_agent_events

# Long enough that a worker between its last step and its exit is not called stuck when five
# engineers' tests share two cores; short enough to keep these tests quick.
STALL = 4.0


def _failures(path: Path) -> list[dict[str, object]]:
    found = []
    for event in read_json_lines(path):
        if isinstance(event, Event) and event.name == "agent.step":
            observed = event.metadata["event"]
            assert isinstance(observed, dict)
            if observed["type"] in ("WorkersFailed", "WorkerStuck"):
                found.append(observed)
    return found


def test_an_expired_timer_kills_the_worker_and_the_job_restarts(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    done = tprun(
        "--nproc-per-node", "2", "--max-restarts", "1", "--timers",
        "--events-file", str(events), WORKER, "--timer-rank", "0",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "missed its deadline in slow-step" in done.stderr
    (failed,) = _failures(events)
    (failure,) = failed["failures"]
    assert failure["local_rank"] == 0
    assert failure["signal"] == "SIGKILL"
    assert "timer expired (scope slow-step): killed with SIGKILL" in failure["reason"]
    (agent,) = replay_agent_events(read_json_lines(events)).values()
    assert agent.state.restart_count == 1 and agent.state.exit_code == 0


def test_without_timers_expires_fails_with_a_clear_message(tmp_path: Path) -> None:
    done = tprun("--nproc-per-node", "1", WORKER, "--timer-rank", "0")
    assert done.returncode == 1
    assert "no timer client" in done.stderr


def test_a_stuck_worker_is_named_and_the_group_restarts(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    done = tprun(
        "--nproc-per-node", "2", "--max-restarts", "1", "--stall-timeout", str(STALL),
        "--events-file", str(events), WORKER, "--stall-rank", "1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "worker local rank 1 (rank 1) is stuck: no progress for" in done.stderr
    assert "local rank 0 (rank 0) is stuck" not in done.stderr
    (stuck,) = _failures(events)
    assert stuck["type"] == "WorkerStuck" and stuck["local_rank"] == 1
    assert float(stuck["idle_for"]) >= STALL
    (agent,) = replay_agent_events(read_json_lines(events)).values()
    assert agent.state.restart_count == 1 and agent.state.exit_code == 0


def test_before_the_first_step_the_first_step_timeout_applies(tmp_path: Path) -> None:
    # Startup gets its own allowance (default max(stall timeout, 60 s)): a slow start is fine.
    slow = tprun("--nproc-per-node", "1", "--stall-timeout", "1", WORKER, "--start-delay", "2.5")
    assert slow.returncode == 0, slow.stderr
    assert "is stuck" not in slow.stderr
    # With a first-step timeout shorter than the start, the worker is stuck with no step yet.
    done = tprun(
        "--nproc-per-node", "1", "--stall-timeout", "1", "--stall-first-step-timeout", "1",
        WORKER, "--start-delay", "30",
    )  # fmt: skip
    assert done.returncode == 1
    assert "worker local rank 0 (rank 0) is stuck: no progress for" in done.stderr
    assert "(no step yet)" in done.stderr


def test_a_worker_stuck_on_every_attempt_fails_the_job_once_the_budget_is_spent(
    tmp_path: Path,
) -> None:
    events = tmp_path / "events.jsonl"
    done = tprun(
        "--nproc-per-node", "2", "--max-restarts", "1", "--stall-timeout", str(STALL),
        "--events-file", str(events), WORKER, "--stall-rank", "1", "--every-attempt",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("worker local rank 1 (rank 1) is stuck") == 2
    assert "job failed (exit code 1): worker local rank 1 failed: local rank 1 made no" in (
        done.stderr
    )
    assert [f["type"] for f in _failures(events)] == ["WorkerStuck", "WorkerStuck"]
    (agent,) = replay_agent_events(read_json_lines(events)).values()
    assert agent.state.restart_count == 1 and agent.state.exit_code == 1
