"""Stopping the launcher: --shutdown-timeout is the workers' grace, the default keeps the whole
job inside a scheduler's 30 s, --signals-to-handle picks the signals, and no process is left,
daemons included (the agent is their child subreaper)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from e2e_helpers import launcher_env, run_cmd

pytestmark = pytest.mark.slow
STUBBORN = str(Path(__file__).resolve().parent / "scripts" / "stubborn.py")


def _start(tmp_path: Path, *flags: str, daemon: bool = False) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / "ready"
    out.mkdir()
    log = tmp_path / "launcher.log"
    env = {**launcher_env(), "OUT": str(out)}
    argv = run_cmd("--standalone", "--nproc-per-node", "2", *flags, STUBBORN)
    with open(log, "wb") as dst:
        proc = subprocess.Popen(
            [*argv, *(["daemon"] if daemon else [])], stdout=dst, stderr=dst, env=env
        )
    deadline = time.monotonic() + 60
    while len([n for n in os.listdir(out) if not n.startswith(".")]) < 2:
        assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
        time.sleep(0.05)
    return proc, log


def _everything(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def _gone_within(proc: subprocess.Popen, family: list[psutil.Process], seconds: float) -> float:
    """Seconds until the launcher (reaped here, its status kept) and ``family`` are gone."""
    started = time.monotonic()
    proc.wait(timeout=seconds)
    left = max(0.1, seconds - (time.monotonic() - started))
    _gone, alive = psutil.wait_procs(family, timeout=left)
    assert alive == [], f"still running after {seconds} s: {alive}"
    return time.monotonic() - started


def test_shutdown_timeout_is_the_grace_for_sigterm_ignoring_workers(tmp_path: Path) -> None:
    proc, log = _start(tmp_path, "--shutdown-timeout", "3", daemon=True)
    family = _everything(proc.pid)
    assert len(family) >= 4  # 2 workers, their daemons (and a watchdog)
    proc.send_signal(signal.SIGTERM)
    took = _gone_within(proc, family, 3 + 2 + 3)  # grace + 2 s, + 3 s for a loaded machine
    assert proc.returncode == 128 + signal.SIGTERM, log.read_text()
    assert took >= 3 - 0.5  # the workers had their grace


def test_by_default_everything_is_gone_within_15_s_of_sigterm(tmp_path: Path) -> None:
    proc, log = _start(tmp_path)
    family = _everything(proc.pid)
    proc.send_signal(signal.SIGTERM)
    _gone_within(proc, family, 15)
    assert proc.returncode == 128 + signal.SIGTERM, log.read_text()


def test_signals_to_handle_chooses_what_stops_the_job(tmp_path: Path) -> None:
    proc, log = _start(tmp_path, "--signals-to-handle", "SIGUSR2", "--shutdown-timeout", "1")
    family = _everything(proc.pid)
    proc.send_signal(signal.SIGUSR2)  # named: it stops the job, as SIGTERM would
    _gone_within(proc, family, 1 + 2 + 3)
    assert proc.returncode == 128 + signal.SIGUSR2, log.read_text()
