"""Events made from the core's Emit effects survive the JSON-lines file and replay on its table.

The agent (a later issue) will route every transition's Emit through ``event_from_emit`` and
``record``; this checks the part that is ours: nothing is lost on the way through the file, and
the recorded phase changes replay on the worker-group table without contradiction.
"""

from __future__ import annotations

from tpelastic.core import worker as w
from tpelastic.core import worker_group as g
from tpelastic.core.values import Emit
from tpelastic.events import EventSource, JsonLinesEventHandler, event_from_emit, read_json_lines


def run_group(handler):
    """Drive one worker group through start, a clean exit and a failure, recording every Emit."""
    state = g.make_group(
        role="trainer",
        local_world_size=2,
        round=1,
        restart_count=0,
        group_rank=0,
        group_world_size=1,
    )
    script = [
        g.GroupStarted(now=1.0, pids=(11, 12)),
        g.WorkerEvent(local_rank=0, event=w.WorkerExited(now=2.0, exitcode=0)),
        g.WorkerEvent(local_rank=1, event=w.WorkerExited(now=3.0, exitcode=1)),
    ]
    emits = []
    for wall, event in enumerate(script):
        step = g.TABLE.step(state, event, None)
        state = step.state
        for effect in step.effects:
            if isinstance(effect, Emit):
                emits.append(effect)
                handler.handle(event_from_emit(effect, EventSource.AGENT, now_wall=1000.0 + wall))
    return state, emits


def test_recorded_emits_read_back_unchanged_and_replay_on_the_table(tmp_path):
    path = tmp_path / "events.jsonl"
    final, emits = run_group(JsonLinesEventHandler(path))
    events = read_json_lines(path)
    assert [(e.name, e.metadata) for e in events] == [(m.name, m.as_dict()) for m in emits]
    assert [e.timestamp for e in events] == sorted(e.timestamp for e in events)

    edges = {(row.src.name, row.dst.name) for row in g.TABLE.rows}
    phase = g.TABLE.initial.name
    for event in events:
        assert event.name == "worker_group.phase"
        assert event.metadata["from"] == phase, "the trace skips a transition"
        assert (phase, event.metadata["to"]) in edges, "the trace has a move the table lacks"
        phase = event.metadata["to"]
    assert phase == final.phase.name == "FAILED"
