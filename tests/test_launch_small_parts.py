"""The launch path's own small replacements for standard-library modules it no longer imports.

``cli.run_parser._columns`` stands in for ``shutil.get_terminal_size`` (argparse's help width) and
``workers.logs.make_temp_dir`` for ``tempfile.mkdtemp`` (the default log folder); both were
dropped from the launch for their import cost (issue 5, tests/test_launch_imports.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import subprocess
import sys

import pytest

from tpelastic.adapters.workers import logs
from tpelastic.adapters.workers.api import WorkerStartError
from tpelastic.cli import run, run_parser


@pytest.mark.parametrize("columns", ["123", "abc", "0", "-5", None])
def test_columns_agree_with_shutil(monkeypatch, columns):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert run_parser._columns() == shutil.get_terminal_size().columns


def test_help_is_what_argparse_prints_by_default(monkeypatch):
    monkeypatch.setenv("COLUMNS", "97")
    ours = run.build_parser().format_help()
    monkeypatch.setattr(run_parser, "_Formatter", argparse.HelpFormatter)
    assert ours == run.build_parser().format_help()
    monkeypatch.setenv("COLUMNS", "150")
    assert run.build_parser().format_help() != ours  # the width is followed


def test_help_on_the_command_line_works_without_a_terminal(monkeypatch):
    done = subprocess.run(
        [sys.executable, "-m", "tpelastic.run", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "COLUMNS": "60"},
    )
    assert done.returncode == 0 and "--nproc-per-node" in done.stdout
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.setattr(run_parser, "_Formatter", argparse.HelpFormatter)
    assert done.stdout == run.build_parser().format_help()


def test_temp_dir_is_private_new_and_under_tmpdir(monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    first, second = logs.make_temp_dir("tpelastic_"), logs.make_temp_dir("tpelastic_")
    assert first != second
    for path in (first, second):
        assert os.path.dirname(path) == str(tmp_path)
        assert os.path.basename(path).startswith("tpelastic_")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
        assert os.listdir(path) == []


def test_temp_dir_skips_places_where_it_cannot_be_made(monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "missing"))
    monkeypatch.setenv("TEMP", str(tmp_path))
    assert os.path.dirname(logs.make_temp_dir("x_")) == str(tmp_path)


def test_temp_dir_nowhere_is_one_clear_error(monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for var in logs._TEMP_VARS:
        monkeypatch.setenv(var, str(blocker / "below"))  # not a folder: ENOTDIR, even for root
    # Stand-ins for /tmp and friends: the real ones are writable on every test machine.
    monkeypatch.setattr(logs, "_TEMP_DIRS", (str(blocker / "tmp"),))
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()  # the current folder, the last place, no longer exists
    with pytest.raises(WorkerStartError, match="cannot create a temporary log folder"):
        logs.make_temp_dir("x_")


def test_default_log_folder_is_made_by_the_launch(monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    attempt = logs.make_attempt_dir(None, 0)
    assert attempt.startswith(str(tmp_path) + os.sep) and os.path.isdir(attempt)
