"""The `tpelastic` command as a user runs it: a real subprocess, exit codes, one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def tpelastic(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tpelastic", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_demo_prints_a_timeline_with_one_world_at_a_time() -> None:
    done = tpelastic("demo")
    assert done.returncode == 0, done.stderr
    assert "found node1 dead" in done.stdout
    assert "late-node is rank" in done.stdout
    assert "worlds that trained side by side: 0" in done.stdout


def test_bad_input_is_one_line_and_exit_2() -> None:
    done = tpelastic("demo", "--nodes", "1")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "tpelastic: error: --nodes must be between 2 and 64, got 1"
    ]


def test_spec_check_notices_drift(tmp_path: Path) -> None:
    assert tpelastic("spec", "--write", "--dir", str(tmp_path)).returncode == 0
    assert tpelastic("spec", "--check", "--dir", str(tmp_path)).returncode == 0
    (tmp_path / "agent.md").write_text("edited by hand\n")
    done = tpelastic("spec", "--check", "--dir", str(tmp_path))
    assert done.returncode == 2
    assert "agent.md" in done.stderr and "tpelastic spec --write" in done.stderr
    assert "Traceback" not in done.stderr
