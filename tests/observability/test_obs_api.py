"""The Python API: the same observability settings on a LaunchConfig, with a callable worker."""

from __future__ import annotations

import json
from pathlib import Path

from obs_helpers import free_port, timed_steps

from tpelastic.events import read_json_lines, replay_agent_events
from tpelastic.launcher import LaunchConfig, elastic_launch


def test_callable_workers_get_timers_and_progress_with_no_setup(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=2,
        rdzv_endpoint="127.0.0.1:0",
        standalone=True,
        local_addr="127.0.0.1",
        event_log_handler=f"jsonl:{events}",
        timers=True,
        stall_timeout=30.0,
        health_port=free_port(),
    )
    results = elastic_launch(config, timed_steps)(5)
    assert sorted(results) == [0, 1]
    for rank, (seen_rank, timer_file, last) in results.items():
        assert seen_rank == rank and last == 5
        assert timer_file.endswith("timer.fifo")
        assert not Path(timer_file).exists()  # the agent removed its pipe when it finished
    (run,) = replay_agent_events(read_json_lines(events)).values()
    assert run.state.phase.name == "SUCCEEDED"
    assert json.loads(events.read_text().splitlines()[0])["metadata"]["seq"] == 0
