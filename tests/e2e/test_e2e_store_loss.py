"""The store-hosting agent dies: the survivors say so in one line and are gone within seconds.

Three real agents on 127.0.0.1 over the c10d backend; the first one started hosts the store.
specs/store_outage.md O6 and specs/exit.md X1.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from e2e_helpers import WORKER, descendants, free_port, tpstart, wait_for_records

pytestmark = pytest.mark.slow

INTERVAL, ATTEMPTS = 0.5, 3
EXPIRY = INTERVAL * ATTEMPTS
CONF = (
    f"join_timeout=20,last_call_timeout=1,keep_alive_interval={INTERVAL},"
    f"keep_alive_max_attempt={ATTEMPTS}"
)


def _agent(port: int, log: Path, out: Path) -> tuple[psutil.Process, subprocess.Popen[bytes]]:
    proc = tpstart(
        "--nnodes=1:3",
        "--nproc-per-node=2",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        "--rdzv-id=store-host-dies",
        "--local-addr=127.0.0.1",
        f"--rdzv-conf={CONF}",
        "--monitor-interval=0.1",
        "--max-restarts=3",
        WORKER,
        "--out",
        str(out),
        "--hold",
        "120",
        log=log,
    )
    return psutil.Process(proc.pid), proc


def _outcome_line(log: Path) -> str | None:
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("tpelastic: job failed"):
            return line
    return None


def test_O6_X1_survivors_of_the_store_host_exit_with_one_line_naming_the_fix(
    tmp_path: Path, out: Path
) -> None:
    port = free_port()
    logs = [tmp_path / f"agent{i}.log" for i in range(3)]
    host_ps, host = _agent(port, logs[0], out)
    wait_for = time.monotonic() + 30
    while not any(c.laddr.port == port for c in host_ps.net_connections("tcp")):
        assert time.monotonic() < wait_for, logs[0].read_text()
        time.sleep(0.05)
    survivors = [_agent(port, logs[i], out)[1] for i in (1, 2)]
    try:
        wait_for_records(out, 6)
        tree = [p.pid for s in survivors for p in descendants(s.pid)]
        tree += [p.pid for p in descendants(host.pid)]
        host.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        # Known within the keep-alive expiry, plus generous room for a loaded 2-core machine.
        bound = EXPIRY + 8.0
        outcome_at: dict[int, float] = {}
        ended_at: dict[int, float] = {}
        while len(ended_at) < 2 and time.monotonic() - killed < bound + 30:
            for i, proc in enumerate(survivors):
                if i not in outcome_at and _outcome_line(logs[i + 1]) is not None:
                    outcome_at[i] = time.monotonic()
                if i not in ended_at and proc.poll() is not None:
                    ended_at[i] = time.monotonic()
            time.sleep(0.02)
        for i, proc in enumerate(survivors):
            text = logs[i + 1].read_text(errors="replace")
            assert i in ended_at, f"survivor {i} still running\n{text[-3000:]}"
            assert proc.returncode == 3, text[-3000:]
            assert ended_at[i] - killed < bound, (ended_at[i] - killed, text[-3000:])
            # X1: the outcome is printed once, and the process is gone soon after it.
            assert text.count("tpelastic: job failed") == 1, text[-3000:]
            assert i in outcome_at
            assert ended_at[i] - outcome_at[i] < 4.0, (ended_at[i] - outcome_at[i], text)
            line = _outcome_line(logs[i + 1])
            assert line is not None
            assert "tpelastic store" in line and "etcd" in line, line
        time.sleep(0.5)
        orphans = [pid for pid in tree if psutil.pid_exists(pid)]
        assert not orphans, orphans
    finally:
        for proc in (host, *survivors):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
