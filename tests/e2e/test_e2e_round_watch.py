"""Three agents (real ``tpelastic run`` processes, tcp backend, our TCPStore) learn of a new round
from the round watcher alone: with the periodic look pushed out to an hour
(``TPELASTIC_LOOK_FALLBACK``), a new node's join and a graceful leave still re-form the world.
Behaviour, not speed: the bounds are generous (the numbers are in docs/benchmarks-launcher.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import free_port, launcher_env, run_cmd

pytestmark = pytest.mark.slow

MARKER = str(Path(__file__).resolve().parent / "scripts" / "round_marker.py")
# Heartbeats are slow on purpose: nobody is judged dead on a busy machine, so every new round
# here comes from a join or a leave that the watcher saw.
CONF = "keep_alive_interval=1,keep_alive_max_attempt=30,last_call_timeout=0.3,join_timeout=60"


def _agent(
    port: int,
    run_id: str,
    tmp: Path,
    name: str,
    out: Path,
    *,
    host: bool,
    env: dict[str, str],
    monitor: str = "0.1",
) -> subprocess.Popen[bytes]:
    args = [
        "--nnodes", "1:3", "--nproc-per-node", "1", "--rdzv-backend", "tcp",
        "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id, "--local-addr", "127.0.0.1",
        "--rdzv-conf", f"{CONF},is_host={int(host)}", "--monitor-interval", monitor,
        "--events-file", str(tmp / f"{name}.events.jsonl"), MARKER, "--out", str(out),
    ]  # fmt: skip
    with open(tmp / f"{name}.log", "wb") as log:
        return subprocess.Popen(
            run_cmd(*args), stdout=log, stderr=subprocess.STDOUT, env={**launcher_env(), **env}
        )


def _markers(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("r*_g*_pid*.json"))]


def _world(out: Path, nodes: int, after: int, timeout: float, logs: Path) -> int:
    """The first round after ``after`` in which ``nodes`` nodes all started their worker."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rounds: dict[int, set[int]] = {}
        for m in _markers(out):
            if m["round"] > after and m["nodes"] == nodes:
                rounds.setdefault(m["round"], set()).add(m["group_rank"])
        done = [r for r, ranks in rounds.items() if len(ranks) == nodes]
        if done:
            return min(done)
        time.sleep(0.1)
    tails = "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted(logs.glob("*.log")))
    raise AssertionError(f"no round of {nodes} nodes after round {after}:\n{tails}")


@pytest.fixture
def agents() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:  # whatever the test left running: ours, by pid
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("an agent did not stop within 30 s of SIGTERM") from None


@pytest.mark.skipif(sys.platform != "linux", reason="pidfds and the launcher's e2e setup")
def test_join_and_leave_are_seen_by_the_watcher_alone(
    tmp_path: Path, agents: list[subprocess.Popen[bytes]]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    env = {"TPELASTIC_LOOK_FALLBACK": "3600"}  # no periodic look in this test's lifetime
    a = _agent(port, "watch", tmp_path, "a", out, host=True, env=env)
    b = _agent(port, "watch", tmp_path, "b", out, host=False, env=env)
    agents += [a, b]
    two = _world(out, 2, -1, 60.0, tmp_path)
    c = _agent(port, "watch", tmp_path, "c", out, host=False, env=env)
    agents.append(c)
    three = _world(out, 3, two, 60.0, tmp_path)  # A and B saw C arrive and opened a round
    assert _stop(c) == 128 + signal.SIGTERM
    _world(out, 2, three, 60.0, tmp_path)  # A and B saw C's leave
    assert _stop(b) == 128 + signal.SIGTERM
    assert _stop(a) == 128 + signal.SIGTERM
    steps = [
        json.loads(line)
        for name in ("a", "b")
        for line in (tmp_path / f"{name}.events.jsonl").read_text().splitlines()
    ]
    seen = [s["metadata"]["event"]["type"] for s in steps if s.get("name") == "agent.step"]
    assert "NodesWaiting" in seen and "NextRoundOpened" in seen
    assert os.environ.get("TPELASTIC_LOOK_FALLBACK") is None  # the knob stayed in the agents


@pytest.mark.skipif(sys.platform != "linux", reason="pidfds and the launcher's e2e setup")
def test_the_watcher_wakes_the_loop_out_of_its_wait_for_the_workers(
    tmp_path: Path, agents: list[subprocess.Popen[bytes]]
) -> None:
    """With a monitor interval of ten minutes the loop's wait for its workers would hide a new
    node for that long; the watcher interrupts the wait, so the world still grows at once."""
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    env = {"TPELASTIC_LOOK_FALLBACK": "3600"}
    slow = {"env": env, "monitor": "600"}
    a = _agent(port, "wake", tmp_path, "a", out, host=True, **slow)  # type: ignore[arg-type]
    b = _agent(port, "wake", tmp_path, "b", out, host=False, **slow)  # type: ignore[arg-type]
    agents += [a, b]
    two = _world(out, 2, -1, 60.0, tmp_path)
    c = _agent(port, "wake", tmp_path, "c", out, host=False, **slow)  # type: ignore[arg-type]
    agents.append(c)
    _world(out, 3, two, 60.0, tmp_path)
    for proc in (c, b, a):
        assert _stop(proc) == 128 + signal.SIGTERM
