"""The agent's console lines, from real agents on a standalone store: who left (SIGTERM), who
died (SIGKILL), who joined, what a node waits for until when, the wording of a SIGTERMed
node's last line, time stamps; and the collapsing of a repeated reason."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from obs_helpers import REPO, WORKER, fast_detection, free_port, wait_for

from tpelastic.adapters.sinks.console_lines import RepeatCollapser

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3} \[tpelastic\] ")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TPELASTIC_", "PET_"))}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_membership_changes_and_a_sigterm_are_named(tmp_path: Path) -> None:
    port = free_port()
    release = tmp_path / "release"
    store = subprocess.Popen(
        [sys.executable, "-m", "tpelastic", "store", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, env=_env(),
    )  # fmt: skip
    procs: list[subprocess.Popen[bytes]] = []

    def start(i: int) -> subprocess.Popen[bytes]:
        cmd = [
            sys.executable, "-m", "tpelastic", "run", "--nnodes", "1:3", "--nproc-per-node", "1",
            "--rdzv-backend", "tcp", "--rdzv-endpoint", f"127.0.0.1:{port}",
            "--rdzv-id", "console", "--local-addr", "127.0.0.1",
            "--rdzv-conf", fast_detection(1, "is_host=false"),
            WORKER, "--hold-until", str(release),
        ]  # fmt: skip
        with open(tmp_path / f"node{i}.log", "wb") as out:  # not a terminal: stamped lines
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=_env())
        procs.append(proc)
        return proc

    def log(i: int) -> str:
        return (tmp_path / f"node{i}.log").read_text()

    def seen(i: int, text: str) -> bool | None:
        return True if text in log(i) else None

    slow = 180.0  # generous: agents start slowly on a loaded 2-core machine

    try:
        start(0)
        leaver = start(1)
        wait_for(lambda: seen(0, "round 0: node"), what="round 0", timeout=slow)
        wait_for(lambda: seen(1, "round 0: node"), what="round 0 on node 1", timeout=slow)
        leaver.send_signal(signal.SIGTERM)
        assert leaver.wait(timeout=slow) == 143
        wait_for(lambda: seen(0, "round 1: node 0 of 1"), what="round 1", timeout=slow)
        joiner = start(2)
        wait_for(lambda: seen(0, "round 2: node"), what="round 2 with the joiner", timeout=slow)
        wait_for(lambda: seen(2, "round 2: node"), what="the joiner in round 2", timeout=slow)
        joiner.kill()  # SIGKILL: no goodbye; its heartbeat stops
        joiner.wait(timeout=30)
        wait_for(lambda: seen(0, "round 3: node 0 of 1"), timeout=slow, what="round 3")
    finally:
        release.touch()
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        store.terminate()
        store.wait(timeout=10)
    first = log(0)
    # The joiner's id, from the line the survivor printed about it.
    found = re.search(r"round \d+: 2 nodes; joined: (\S+) \(127\.0\.0\.1\)", first)
    assert found is not None, first
    ids = {2: found.group(1)}
    assert re.search(r"round 1 opened: node \S+ left\n", first), first
    assert re.search(r"round 1: 1 node; left: \S+ \(127\.0\.0\.1\)\n", first), first
    assert f"round 2: 2 nodes; joined: {ids[2]} (127.0.0.1)" in first
    assert f"round 3 opened: node {ids[2]} died (no heartbeat)" in first
    assert f"round 3: 1 node; died: {ids[2]} (127.0.0.1)" in first
    waits = r"joining the next round: waiting for 1\.\.3 nodes until \d\d:\d\d:\d\d"
    assert re.search(waits, first), first
    lines = [line for line in first.splitlines() if "[tpelastic]" in line]
    assert lines and all(STAMP.match(line) for line in lines), lines
    last = log(1)
    assert "tpelastic: this node left the job: stopped by SIGTERM (exit code 143)" in last
    assert "job failed" not in last and "interrupted by signal 15\ntpelastic: job" not in last


def test_a_long_reason_is_printed_once() -> None:
    logger = logging.getLogger("test.collapse")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    handler = Keep()
    handler.addFilter(RepeatCollapser())
    logger.addHandler(handler)
    reason = "Connection closed by peer rank 1 ([127.0.0.1]:40089). " * 5
    try:
        logger.warning("worker rank 1 failed: %s", reason)
        logger.info("stopping workers: worker local rank 1 failed: %s", reason)
        logger.info("short: same")
        logger.info("again: same")
    finally:
        logger.removeHandler(handler)
    assert records[0] == f"worker rank 1 failed: {reason}"
    assert records[1] == "stopping workers: worker local rank 1 failed: (the reason above)"
    assert records[2:] == ["short: same", "again: same"]  # short reasons stay


def test_timestamps_flag(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "tpelastic", "run", "--standalone", "--log-timestamps", "off"]
    done = subprocess.run([*cmd, WORKER], capture_output=True, text=True, timeout=120, env=_env())
    assert done.returncode == 0, done.stderr
    assert "[tpelastic] round 0" in done.stderr and not STAMP.search(done.stderr)
    bad = subprocess.run(
        [*cmd[:-1], "sometimes", WORKER], capture_output=True, text=True, timeout=60, env=_env()
    )
    assert bad.returncode == 2 and "--log-timestamps must be on, off or auto" in bad.stderr
