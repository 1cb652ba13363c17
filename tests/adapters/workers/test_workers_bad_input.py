"""Bad input to start_processes: one clear line, and nothing started."""

from __future__ import annotations

import os
import sys

import psutil
import pytest
from conftest import script

from tpelastic.adapters.workers.api import WorkerStartError
from tpelastic.multiprocessing import LogsSpecs, start_processes


def ok(x: int) -> int:
    return x


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.mark.parametrize(
    ("entrypoint", "args", "kwargs", "message"),
    [
        (sys.executable, ("/no/such/train.py",), {}, "script '/no/such/train.py' does not exist"),
        (
            sys.executable,
            ("-u", "-W", "ignore", "/no/x.py"),
            {},
            "script '/no/x.py' does not exist",
        ),
        ("/no/such/binary", (), {}, "entrypoint '/no/such/binary' does not exist"),
        ("no-such-command-xyz", (), {}, "is not an executable on PATH"),
        (script("lines.py"), (), {}, "is not executable"),
        (lambda x: x, {0: (1,)}, {}, "cannot be pickled for spawn"),
        (ok, {0: (1,)}, {"start_method": "thread"}, "unknown start method 'thread'"),
        (ok, {0: (1,)}, {"redirects": "0:9"}, "invalid redirect spec"),
        (ok, {0: (1,)}, {"tee": "x"}, "invalid redirect spec"),
        (ok, {0: [1]}, {}, "args[0] must be a tuple"),
        (ok, {1: (1,)}, {}, "one tuple per local rank"),
        (42, (), {}, "entrypoint must be a command string or a callable"),
        (sys.executable, "train.py", {}, "not the string 'train.py'"),
        (sys.executable, {1: ()}, {}, "one tuple per local rank"),
        (sys.executable, (), {"attempt": "../up"}, "invalid attempt id"),
    ],
)
def test_bad_input_is_one_line_before_anything_starts(entrypoint, args, kwargs, message, tmp_path):
    before = _children()
    with pytest.raises(WorkerStartError) as info:
        start_processes("bad", entrypoint, args, {0: {}}, log_dir=str(tmp_path), **kwargs)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert _children() == before
    assert os.listdir(tmp_path) == []  # no attempt folder either


def test_bad_envs_and_log_dir(tmp_path):
    with pytest.raises(WorkerStartError, match="envs is empty"):
        start_processes("b", ok, {}, {})
    with pytest.raises(WorkerStartError, match="envs keys must be local ranks 0..1"):
        start_processes("b", ok, {0: (), 2: ()}, {0: {}, 2: {}})
    afile = tmp_path / "file"
    afile.write_text("")
    with pytest.raises(WorkerStartError, match="is not a directory"):
        start_processes("b", ok, {0: (1,)}, {0: {}}, log_dir=str(afile))
    with pytest.raises(WorkerStartError, match="not both"):
        start_processes("b", ok, {0: (1,)}, {0: {}}, logs_specs=LogsSpecs(), log_dir=str(tmp_path))


def test_python_module_and_inline_code_are_not_checked_as_scripts(tmp_path):
    ctx = start_processes(
        "m",
        sys.executable,
        ("-m", "json.tool", "--help"),
        {0: {}},
        log_dir=str(tmp_path),
        redirects="3",
    )
    try:
        result = ctx.wait(timeout=15, period=0.05)
    finally:
        ctx.close()
    assert result is not None and not result.is_failed()
