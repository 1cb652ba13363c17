"""Event values, the JSON-lines schema and every event handler."""

from __future__ import annotations

import enum
import io
import json
import logging
import multiprocessing

import pytest

from tpelastic.core.values import Emit
from tpelastic.events import (
    ConsoleEventHandler,
    Event,
    EventSource,
    JsonLinesEventHandler,
    LoggingEventHandler,
    NodeState,
    NullEventHandler,
    RdzvEvent,
    event_from_emit,
    from_json_dict,
    get_event_handler,
    read_json_lines,
    record,
    to_json_dict,
)


class Phase(enum.Enum):
    GATHERING = 1


EVENT = Event(name="agent.started", source=EventSource.AGENT, timestamp=12.5, metadata={"n": 2})
RDZV = RdzvEvent(
    name="rdzv.joined",
    run_id="r1",
    message="joined",
    hostname="host",
    pid=7,
    node_state=NodeState.RUNNING,
    master_endpoint="host:29400",
    rank=0,
    local_id=2,
    error_trace="",
    round=3,
    node="host:1",
    timestamp=13.0,
)


def test_json_round_trip_keeps_every_field():
    for event in (EVENT, RDZV):
        obj = json.loads(json.dumps(to_json_dict(event)))
        assert obj["schema_version"] == 1
        assert from_json_dict(obj) == event


def test_schema_v1_shape_is_as_documented():
    assert to_json_dict(EVENT) == {
        "schema_version": 1,
        "kind": "event",
        "name": "agent.started",
        "source": "AGENT",
        "timestamp": 12.5,
        "metadata": {"n": 2},
    }
    assert set(to_json_dict(RDZV)) == {
        "schema_version",
        "kind",
        "name",
        "run_id",
        "round",
        "node",
        "state",
        "rank",
        "message",
        "timestamp",
        "hostname",
        "pid",
        "master_endpoint",
        "local_id",
        "error_trace",
    }


def test_event_from_emit_makes_metadata_json():
    emit = Emit(
        name="round.completed",
        fields=(("round", 4), ("phase", Phase.GATHERING), ("nodes", ("a", "b")), ("extra", object)),
    )
    event = event_from_emit(emit, EventSource.AGENT, now_wall=99.0)
    assert event.name == "round.completed" and event.timestamp == 99.0
    assert event.metadata["round"] == 4
    assert event.metadata["phase"] == "GATHERING"
    assert event.metadata["nodes"] == ["a", "b"]
    assert isinstance(event.metadata["extra"], str)
    json.dumps(to_json_dict(event))  # everything is serialisable


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"schema_version": 2, "kind": "event"}, "unsupported event schema_version 2"),
        ({"schema_version": 1, "kind": "nope"}, "unknown event kind 'nope'"),
        ({"schema_version": 1, "kind": "event", "name": "x"}, "lacks field 'source'"),
        (
            {
                "schema_version": 1,
                "kind": "event",
                "name": "x",
                "source": "MARS",
                "timestamp": 0,
                "metadata": {},
            },
            "bad field",
        ),
    ],
)
def test_bad_records_are_one_clear_error(obj, message):
    with pytest.raises(ValueError, match=message):
        from_json_dict(obj)


def test_jsonl_handler_writes_one_parseable_object_a_line(tmp_path):
    path = tmp_path / "events.jsonl"
    record(EVENT, f"jsonl:{path}")
    record(RDZV, JsonLinesEventHandler(path))
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    assert [json.loads(line)["kind"] for line in lines] == ["event", "rdzv"]
    assert read_json_lines(path) == [EVENT, RDZV]


def _write_many(path: str, tag: int) -> None:
    handler = JsonLinesEventHandler(path)
    for i in range(200):
        handler.handle(
            Event(name=f"w{tag}", source=EventSource.WORKER, metadata={"i": i, "pad": "x" * 300})
        )


def test_jsonl_lines_stay_whole_with_concurrent_writer_processes(tmp_path):
    path = str(tmp_path / "shared.jsonl")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_many, args=(path, t)) for t in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    events = read_json_lines(path)  # raises on any torn or interleaved line
    assert sorted((e.name, e.metadata["i"]) for e in events) == sorted(
        (f"w{t}", i) for t in range(3) for i in range(200)
    )


def test_jsonl_read_error_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(to_json_dict(EVENT)) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2:"):
        read_json_lines(path)


def test_jsonl_handler_never_raises_on_an_unwritable_path(tmp_path, caplog):
    handler = JsonLinesEventHandler(tmp_path / "missing-dir" / "e.jsonl")
    with caplog.at_level(logging.WARNING):
        handler.handle(EVENT)
        handler.handle(EVENT)
    assert sum("cannot write events" in r.getMessage() for r in caplog.records) == 1


def test_console_handler_writes_json_to_its_stream():
    stream = io.StringIO()
    record(EVENT, ConsoleEventHandler(stream))
    assert from_json_dict(json.loads(stream.getvalue())) == EVENT


def test_console_handler_defaults_to_stderr(capsys):
    record(RDZV, "console")
    assert json.loads(capsys.readouterr().err)["run_id"] == "r1"


def test_logging_handler_logs_the_json_line(caplog):
    with caplog.at_level(logging.INFO, logger="tpelastic.events"):
        record(EVENT, "logging")
        LoggingEventHandler().handle(RDZV)
    messages = [r.getMessage() for r in caplog.records if r.name == "tpelastic.events"]
    assert [from_json_dict(json.loads(m)) for m in messages] == [EVENT, RDZV]


def test_null_handler_and_unknown_destination(capsys):
    record(EVENT)  # default destination is null: writes nothing anywhere
    NullEventHandler().handle(EVENT)
    assert capsys.readouterr() == ("", "")
    with pytest.raises(ValueError, match="unknown event destination 'kafka'; known: null"):
        get_event_handler("kafka")
