"""The run secret against a stranger who reaches the store's port (docs/security.md), with real
agents: one forged `closed` record, and a phantom member (one ADD on `arrivals` plus one slot).
Without the secret both attacks work (that is what the secret is for); with it, neither does."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from e2e_helpers import FAST, free_port, tpstart

from tpelastic.adapters.stores import StoreUnavailable
from tpelastic.adapters.stores.signed import load_secret
from tpelastic.adapters.stores.tcp_client import TcpStoreClient
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.records import ClosedRecord, NodeInfo, encode_closed, encode_node

HOLD = str(Path(__file__).resolve().parent / "scripts" / "hold_world.py")
pytestmark = pytest.mark.slow


def _agent(port: int, run_id: str, nnodes: str, out: Path, log: Path, conf: str, hold: float):
    return tpstart(
        "--nnodes", nnodes, "--nproc-per-node", "1", "--rdzv-backend", "tcp",
        "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id,
        "--local-addr", "127.0.0.1", "--rdzv-conf", FAST + conf, "--monitor-interval", "0.1",
        HOLD, str(out), str(hold), log=log,
    )  # fmt: skip


def _worlds(out: Path) -> list[int]:
    return [json.loads(p.read_text())["world_size"] for p in sorted(out.glob("rank*.json"))]


def _wait(predicate, within: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def _stop(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def _secret_path(tmp_path: Path, secured: bool) -> str | None:
    if not secured:
        return None
    path = tmp_path / "run.secret"
    path.write_text("a-run-secret-of-enough-bytes\n")
    return str(path)


def _conf(tmp_path: Path, secured: bool) -> str:
    path = _secret_path(tmp_path, secured)
    return "" if path is None else f",secret_file={path}"


def _stranger(port: int) -> TcpStoreClient:
    return TcpStoreClient("127.0.0.1", port, timeout=2.0)


@pytest.mark.parametrize("secured", [False, True], ids=["no-secret", "secret"])
def test_a_forged_closed_record(tmp_path: Path, secured: bool) -> None:
    port, run_id, out, log = free_port(), "forged-close", tmp_path / "out", tmp_path / "a.log"
    out.mkdir()
    agent = _agent(port, run_id, "1", out, log, _conf(tmp_path, secured), hold=6.0)
    try:
        assert _wait(lambda: _worlds(out), 60.0), log.read_text()
        stranger = _stranger(port)
        forged = encode_closed(ClosedRecord(outcome="failed", reason="forged"))
        started = time.monotonic()
        try:
            stranger.set(RunKeys(run_id).closed(), forged)
            wrote = True
        except StoreUnavailable:
            wrote = False
        stranger.close()
        code = agent.wait(60)
        took = time.monotonic() - started
    finally:
        _stop(agent)
    if secured:
        assert not wrote  # the server closed the stranger's connection
        assert code == 0 and took > 3.0, log.read_text()  # the worker ran its 6 s to the end
    else:
        assert wrote and code != 0 and took < 5.0, log.read_text()


@pytest.mark.parametrize("secured", [False, True], ids=["no-secret", "secret"])
def test_a_phantom_member(tmp_path: Path, secured: bool) -> None:
    port, run_id, out = free_port(), "phantom", tmp_path / "out"
    out.mkdir()
    conf = _conf(tmp_path, secured)
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    agents = [_agent(port, run_id, "3", out, log, conf, hold=2.0) for log in logs]
    try:
        keys = RunKeys(run_id)
        # Both real agents registered (the counter is 2), then the phantom takes slot 2. With
        # the secret the stranger cannot read the counter, so one who holds it watches.
        watcher = TcpStoreClient(
            "127.0.0.1", port, timeout=2.0, secret=load_secret(_secret_path(tmp_path, secured))
        )
        assert _wait(lambda: _arrivals(watcher, keys) >= 2, 60.0)
        watcher.close()
        stranger = _stranger(port)
        try:
            wrote = stranger.add(keys.arrivals(0), 1) == 3
            stranger.set(keys.slot(0, 2), encode_node(NodeInfo(node="phantom", addr="10.9.9.9")))
        except StoreUnavailable:
            wrote = False
        stranger.close()
        started = _wait(lambda: len(_worlds(out)) >= 2, 20.0 if not secured else 8.0)
    finally:
        _stop(*agents)
    if secured:
        assert not wrote and not started and _worlds(out) == [], _worlds(out)
    else:
        assert wrote and started and _worlds(out) == [3, 3], _worlds(out)


def _arrivals(store: TcpStoreClient, keys: RunKeys) -> int:
    try:
        raw = store.get(keys.arrivals(0))
    except StoreUnavailable:
        return 0
    return int(raw or 0)
