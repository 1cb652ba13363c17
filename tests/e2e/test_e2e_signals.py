"""SIGTERM/SIGINT to the launcher stop everything: exit 128 + signum, no process left behind."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psutil
import pytest
from e2e_helpers import WORKER, descendants, records, tpstart

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_to_the_launcher_stops_everything(
    sig: signal.Signals, tmp_path: Path, out: Path
) -> None:
    log = tmp_path / "launcher.log"
    proc = tpstart(
        "--standalone",
        "--nproc-per-node",
        "2",
        WORKER,
        "--out",
        str(out),
        "--hold",
        "60",
        log=log,
    )
    deadline = time.monotonic() + 60
    while len(records(out)) < 2:
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    family = descendants(proc.pid)
    assert len(family) >= 2  # the workers (and their watchdog) are running
    proc.send_signal(sig)
    assert proc.wait(timeout=30) == 128 + sig, log.read_text()
    gone, alive = psutil.wait_procs(family, timeout=5)
    assert alive == [], f"left behind: {alive}"
    assert f"interrupted by signal {int(sig)}" in log.read_text()
