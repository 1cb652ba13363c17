"""Agent events end to end: a real job with a crash and a restart, recorded and replayed."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from obs_helpers import WORKER, finish, tprun, tpstart, two_tcp_nodes_with_a_crash, wait_for

from tpelastic.adapters.sinks.agent_trace import ReplayMismatch
from tpelastic.core.agent import AgentPhase
from tpelastic.events import Event, RdzvEvent, read_json_lines, replay_agent_events


def _crash_once(tmp_path: Path, *flags: str) -> tuple[list[object], str]:
    path = tmp_path / "events.jsonl"
    done = tprun(
        "--nproc-per-node", "2", "--max-restarts", "1", *flags, "--events-file", str(path),
        WORKER, "--crash-rank", "1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return list(read_json_lines(path)), done.stderr


def test_A8_a_crash_and_restart_replay_through_the_core(tmp_path: Path) -> None:
    events, _ = _crash_once(tmp_path)
    replayed = replay_agent_events(events)  # raises on any contradiction
    assert len(replayed) == 1
    (result,) = replayed.values()
    assert result.state.phase is AgentPhase.SUCCEEDED
    assert result.state.restart_count == 1
    steps = [e for e in events if isinstance(e, Event) and e.name == "agent.step"]
    assert result.steps == len(steps)
    observed = [s.metadata["event"]["type"] for s in steps]
    assert observed == [  # the failure restarts the round in place: no second join
        "AgentStarted",
        "RoundCompleted",
        "WorkersFailed",
        "OwnAttemptOpened",
        "WorkersSucceeded",
        "ExitBarrierRead",
    ]
    failed = steps[2].metadata["event"]["failures"]
    assert [f["local_rank"] for f in failed] == [1]
    effects = [e["type"] for e in steps[2].metadata["effects"]]
    assert effects == ["StopWorkers", "OpenAttempt"]  # the start waits for the open to land
    assert [e["type"] for e in steps[3].metadata["effects"]] == ["StartWorkers"]
    assert result.state.attempt == 1
    rdzv = [(e.name, e.round, e.rank) for e in events if isinstance(e, RdzvEvent)]
    assert rdzv == [
        ("rdzv.round_joined", 0, 0),
        ("rdzv.attempt", 0, 0),
        ("rdzv.closed", 0, 0),
    ]


def test_a_tampered_or_missing_record_is_named(tmp_path: Path) -> None:
    events, _ = _crash_once(tmp_path)
    steps = [e for e in events if isinstance(e, Event) and e.name == "agent.step"]
    # Drop the failure: the records after it are numbered past a gap.
    with pytest.raises(ReplayMismatch, match="step 3: expected step 2"):
        replay_agent_events([e for e in events if e is not steps[2]])
    meta = dict(steps[3].metadata)
    meta["to"] = "FAILED"
    forged = Event(name="agent.step", source=steps[3].source, metadata=meta)
    with pytest.raises(ReplayMismatch, match="step 3: recorded to 'FAILED'"):
        replay_agent_events([forged if e is steps[3] else e for e in events])
    meta = dict(steps[2].metadata)  # an in-place restart that claims another attempt
    meta["effects"] = [
        {**e, "attempt": 2} if e["type"] == "OpenAttempt" else e for e in meta["effects"]
    ]
    forged = Event(name="agent.step", source=steps[2].source, metadata=meta)
    with pytest.raises(ReplayMismatch, match="step 2: recorded effects"):
        replay_agent_events([forged if e is steps[2] else e for e in events])


def test_console_events_go_to_stderr(tmp_path: Path) -> None:
    done = tprun("--nproc-per-node", "1", "--events", "console", WORKER)
    assert done.returncode == 0, done.stderr
    assert '"name":"agent.step"' in done.stderr
    assert '"name":"rdzv.round_joined"' in done.stderr


def test_two_nodes_share_one_events_file_and_both_replay(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    codes = two_tcp_nodes_with_a_crash(tmp_path, "obs-two", path)
    assert codes == [0, 0], [(tmp_path / f"node{i}.log").read_text()[-2000:] for i in range(2)]
    replayed = replay_agent_events(read_json_lines(path))
    assert len(replayed) == 2
    for run in replayed.values():
        assert run.state.phase is AgentPhase.SUCCEEDED and run.state.restart_count == 1


def test_an_interrupted_run_replays_and_records_its_leave(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    proc = tpstart(
        "--nproc-per-node", "2", "--events-file", str(path),
        WORKER, "--hold-until", str(tmp_path / "never"),
        log=tmp_path / "run.log",
    )  # fmt: skip

    def running() -> bool | None:
        return True if path.exists() and '"RoundCompleted"' in path.read_text() else None

    try:
        wait_for(running, what="the first round in the events file")
    finally:
        proc.send_signal(signal.SIGTERM)
        code = finish(proc)
    assert code == 128 + signal.SIGTERM, (tmp_path / "run.log").read_text()
    events = read_json_lines(path)
    (run,) = replay_agent_events(events).values()
    assert run.state.phase is AgentPhase.FAILED and run.state.exit_code == 143
    left = [e for e in events if isinstance(e, RdzvEvent) and e.name == "rdzv.left"]
    assert [(e.node_state.name, e.message) for e in left] == [
        ("FAILED", "interrupted by signal 15")
    ]
