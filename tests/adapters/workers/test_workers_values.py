"""Values: Std/to_map parsing, failure summaries and root cause, error files and record."""

from __future__ import annotations

import json
import os
import signal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpelastic.adapters.workers.api import (
    ChildFailedError,
    ProcessFailure,
    Redirects,
    Std,
    WorkerStartError,
    to_map,
)
from tpelastic.adapters.workers.errorfile import read_error_file, record, write_error_file


def test_to_map_expands_one_value_to_every_rank():
    assert to_map("3", 2) == {0: Std.ALL, 1: Std.ALL}
    assert to_map(Std.OUT, 3) == {0: Std.OUT, 1: Std.OUT, 2: Std.OUT}
    assert to_map(2, 1) == {0: Std.ERR}
    assert Redirects.ALL is Std.ALL


def test_to_map_per_rank_spec_fills_missing_ranks_with_none():
    assert to_map("0:1,1:2", 3) == {0: Std.OUT, 1: Std.ERR, 2: Std.NONE}
    assert to_map({1: Std.ALL}, 2) == {0: Std.NONE, 1: Std.ALL}


@pytest.mark.parametrize("spec", ["4", "x", "0:1,0:2", "0:", "a:1", "0:1;1:2", "", "-1"])
def test_to_map_rejects_bad_specs_with_one_line(spec):
    with pytest.raises(WorkerStartError, match="invalid redirect spec") as info:
        to_map(spec, 2)
    assert "\n" not in str(info.value)


def test_to_map_ignores_ranks_outside_the_local_world_as_torch():
    assert to_map("5:1,1:2", 2) == {0: Std.NONE, 1: Std.ERR}


def _failure(rank: int, when: float, code: int = 1, data=None) -> ProcessFailure:
    return ProcessFailure(
        local_rank=rank, pid=100 + rank, exitcode=code, timestamp=when, error_file_data=data
    )


def test_root_cause_is_the_earliest_failure_not_the_last_rank():
    failures = {
        0: _failure(0, 20.0),
        1: _failure(1, 10.0, code=-signal.SIGKILL),
        2: _failure(2, 15.0),
    }
    err = ChildFailedError("train.py", failures, host="nodeA")
    assert err.get_first_failure()[0] == 1
    text = str(err)
    root = text.split("Other failures:")[0]
    assert "local_rank: 1" in root and "SIGKILL" in root and "host: nodeA" in root
    assert text.index("[default2]") < text.index("[default0]")  # others in time order


def test_format_msg_frames_with_torchs_delimiters_and_none_without():
    err = ChildFailedError("train.py", {0: _failure(0, 2.0), 1: _failure(1, 1.0)}, host="h")
    lines = err.format_msg().splitlines()
    assert set(lines[0]) == {"="} and lines[0] == lines[-1] and len(lines[0]) <= 60
    assert lines[1] == "train.py FAILED" and set(lines[2]) == {"-"}
    assert set(lines[lines.index("Other failures:") - 1]) == {"-"}
    bare = err.format_msg(boarder_delim="", section_delim="").splitlines()
    assert bare == [line for line in lines if set(line) - {"=", "-"}]
    assert err.format_msg("#", "~").splitlines()[0] == "#" * len(lines[0])
    assert str(err) == err.format_msg()


def test_summary_carries_the_traceback_of_the_root_cause():
    data = {
        "message": "bad",
        "exception_type": "ValueError",
        "traceback": "Traceback...\nValueError: bad",
    }
    err = ChildFailedError("x", {3: _failure(3, 1.0, data=data)})
    assert "ValueError: bad" in str(err) and "Traceback..." in str(err)
    assert err.failures[3].message == "ValueError: bad"


def test_failure_message_without_error_file_names_exit_or_signal():
    assert "exited with code 7" in _failure(0, 0, code=7).message
    assert "SIGTERM" in _failure(0, 0, code=-15).message
    assert _failure(0, 0, code=-15).signal_name() == "SIGTERM"


def test_child_failed_error_needs_a_failure():
    with pytest.raises(ValueError):
        ChildFailedError("x", {})


def test_record_writes_a_schema_1_error_file_and_reraises(tmp_path, monkeypatch):
    path = tmp_path / "error.json"
    monkeypatch.setenv("TPELASTIC_ERROR_FILE", str(path))
    monkeypatch.setenv("RANK", "5")

    @record
    def broken():
        raise KeyError("missing")

    with pytest.raises(KeyError):
        broken()
    data = json.loads(path.read_text())
    assert data["schema_version"] == 1
    assert data["exception_type"] == "KeyError" and "missing" in data["message"]
    assert "broken" in data["traceback"] and data["rank"] == 5 and data["pid"] == os.getpid()
    assert isinstance(data["timestamp"], float)


def test_record_honours_the_torch_variable_and_does_not_overwrite(tmp_path, monkeypatch):
    path = tmp_path / "e.json"
    monkeypatch.delenv("TPELASTIC_ERROR_FILE", raising=False)
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    assert write_error_file(RuntimeError("first")) == str(path)
    write_error_file(RuntimeError("second"))
    assert read_error_file(str(path))["message"] == "first"


def test_record_passes_return_values_through_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TPELASTIC_ERROR_FILE", str(tmp_path / "e.json"))
    assert record(lambda x: x + 1)(1) == 2
    assert not (tmp_path / "e.json").exists()


def test_read_error_file_converts_torch_format_and_tolerates_garbage(tmp_path):
    torch_style = {
        "message": {"message": "oops", "extraInfo": {"py_callstack": "tb", "timestamp": "12"}}
    }
    (tmp_path / "t.json").write_text(json.dumps(torch_style))
    data = read_error_file(str(tmp_path / "t.json"))
    assert data["message"] == "oops" and data["traceback"] == "tb" and data["timestamp"] == 12.0
    (tmp_path / "bad.json").write_text("{not json")
    assert read_error_file(str(tmp_path / "bad.json")) is None
    assert read_error_file(str(tmp_path / "absent.json")) is None


@given(
    st.integers(min_value=1, max_value=8).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.dictionaries(st.integers(0, n - 1), st.integers(0, 3), min_size=1),
        )
    )
)
def test_to_map_reads_back_any_per_rank_spec(case):
    size, per_rank = case
    spec = ",".join(f"{rank}:{value}" for rank, value in per_rank.items())
    expanded = to_map(spec, size)
    assert set(expanded) == set(range(size))
    assert all(expanded[r] == Std(per_rank.get(r, 0)) for r in range(size))
