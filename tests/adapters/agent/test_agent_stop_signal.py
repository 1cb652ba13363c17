"""A stop signal stops the agent wherever its loop's thread is when the signal lands.

A real LocalElasticAgent (scripts/stop_signal_agent.py, a process of its own: signal handlers
live in its main thread) runs over our TCPStore and real DynamicRendezvousHandlers, and is sent
SIGTERM from inside a store call its own thread makes, at moments that matter: while a round
re-forms after a peer left (the console line naming who left reads the store and carries on
after any ``Exception``), while it arrives at the exit barrier (that write turns any
``Exception`` into a lost store), inside a store client that swallows even ``BaseException``,
and while its loop waits out a minute-long monitor interval and the kernel hands the signal to
another thread. Each time the agent must end with 128 + SIGTERM within seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tpelastic.adapters.stores.tcp_server import StoreServer

SCRIPT = str(Path(__file__).resolve().parent / "scripts" / "stop_signal_agent.py")
REPO = Path(__file__).resolve().parents[3]
BOUND = 10.0  # seconds from the signal to the agent's return: generous for a loaded machine

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the agent's Linux setup")


def _run(server: StoreServer, run_id: str, scenario: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, SCRIPT, str(server.port), run_id[:40], scenario],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ended: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert ended["after_signal"] is not None, f"no signal was sent:\n{done.stderr[-3000:]}"
    return ended


def test_a_signal_while_the_round_re_forms_after_a_leave_stops_the_agent(
    tmp_path: Path, server: StoreServer
) -> None:
    ended = _run(server, tmp_path.name, "re-form")
    assert ended["exit_code"] == 128 + signal.SIGTERM, ended
    assert ended["after_signal"] < BOUND
    assert ended["round"] == 0, ended  # stopped before round 1 started anything


def test_a_signal_at_the_exit_barrier_is_a_stop_not_a_lost_store(
    tmp_path: Path, server: StoreServer
) -> None:
    ended = _run(server, tmp_path.name, "barrier")
    assert ended["exit_code"] == 128 + signal.SIGTERM, ended


def test_a_stop_swallowed_by_a_store_client_is_still_taken_at_the_next_pass(
    tmp_path: Path, server: StoreServer
) -> None:
    """The client eats the raise; the handler's record is what the loop takes next pass."""
    ended = _run(server, tmp_path.name, "swallowed")
    assert ended["exit_code"] == 128 + signal.SIGTERM, ended
    assert ended["after_signal"] < BOUND


def test_a_signal_handed_to_another_thread_ends_a_long_inbox_wait(
    tmp_path: Path, server: StoreServer
) -> None:
    ended = _run(server, tmp_path.name, "other-thread")
    assert ended["exit_code"] == 128 + signal.SIGTERM, ended
    assert ended["after_signal"] < BOUND  # the monitor interval is 60 s
