"""Our TCPStore client through a lost server: real ``tpelastic store`` processes, killed, paused.

specs/store_outage.md: O1 (gone and silent told apart), O2 (announced once, at once), O4 (a
server back in time is used again, a pause waited out).
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from tpelastic.adapters.stores import StoreUnavailable
from tpelastic.adapters.stores.tcp_client import connect
from tpelastic.core.store_outage import OutagePolicy

LOGGER = "tpelastic.adapters.stores.tcp_client"


def _server(port: int = 0) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tpelastic", "store", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    assert ready.startswith("tpelastic store listening on"), ready
    return proc, int(ready.rsplit(":", 1)[1])


def _end(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
    proc.wait(10)


def test_O2_a_killed_server_is_announced_once_then_one_line_naming_the_fix(
    caplog: pytest.LogCaptureFixture,
) -> None:
    proc, port = _server()
    client = connect(
        "127.0.0.1",
        port,
        timeout=30.0,
        outage=OutagePolicy(keep_alive_expiry=1.0, read_timeout=30.0),
    )
    try:
        client.set("k", b"v")
        proc.kill()
        proc.wait(10)
        errors: list[StoreUnavailable] = []

        def call() -> None:
            try:
                client.get("k")
            except StoreUnavailable as error:
                errors.append(error)

        caplog.set_level(logging.WARNING, logger=LOGGER)
        started = time.monotonic()
        callers = [threading.Thread(target=call) for _ in range(3)]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(20)
        spent = time.monotonic() - started
        # Waited out for the expiry (1 s), not for the 30 s read timeout.
        assert 0.9 <= spent < 6.0, spent
        assert len(errors) == 3 and all(e.loss == "gone" for e in errors)
        reason = str(errors[0])
        assert "is gone" in reason and "tpelastic store" in reason and "etcd" in reason
        assert "\n" not in reason
        announced = [
            r.getMessage() for r in caplog.records if "refuses connections" in r.getMessage()
        ]
        assert len(announced) == 1, announced  # one outage, three callers: one line
        assert "up to the keep-alive expiry, 1s" in announced[0]
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="is gone"):
            client.get("k")  # past the deadline: at once
        assert time.monotonic() - started < 0.5
    finally:
        client.close()
        _end(proc)


def test_O4_a_server_back_within_the_expiry_is_used_again(caplog: pytest.LogCaptureFixture) -> None:
    proc, port = _server()
    client = connect(
        "127.0.0.1",
        port,
        timeout=30.0,
        outage=OutagePolicy(keep_alive_expiry=20.0, read_timeout=30.0),
    )
    second: subprocess.Popen[str] | None = None
    try:
        client.set("k", b"v")
        proc.kill()
        proc.wait(10)
        caplog.set_level(logging.WARNING, logger=LOGGER)
        result: list[object] = []
        caller = threading.Thread(target=lambda: result.append(client.set("k", b"again")))
        caller.start()
        time.sleep(0.5)
        assert caller.is_alive()  # backing off, not failed
        second, _ = _server(port)
        caller.join(15)
        assert result == [None]
        assert client.get("k") == b"again"
        messages = [r.getMessage() for r in caplog.records]
        assert any("answers again after" in m for m in messages), messages
    finally:
        client.close()
        _end(proc)
        if second is not None:
            _end(second)


def test_O4_a_paused_server_is_waited_out_not_treated_as_gone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    proc, port = _server()
    client = connect(
        "127.0.0.1",
        port,
        timeout=10.0,
        outage=OutagePolicy(keep_alive_expiry=0.5, read_timeout=10.0),
    )
    try:
        client.set("k", b"v")
        caplog.set_level(logging.WARNING, logger=LOGGER)
        _stop(proc)
        threading.Timer(2.0, proc.send_signal, (signal.SIGCONT,)).start()
        started = time.monotonic()
        # Longer than the expiry: a pause is not a death.
        assert client.get("k") == b"v"
        assert client.add("n", 1) == 1
        assert 1.5 <= time.monotonic() - started < 9.0
        # O2: said at once (after silent_after, 1 s), not when read_timeout runs out.
        messages = [r.getMessage() for r in caplog.records]
        silent = [m for m in messages if "has not answered for 1s" in m]
        assert len(silent) == 1 and "up to read_timeout, 10s" in silent[0], messages
        assert any("answers again after" in m for m in messages), messages
    finally:
        client.close()
        _end(proc)


def test_O1_a_server_silent_past_read_timeout_fails_as_silent() -> None:
    proc, port = _server()
    policy = OutagePolicy(keep_alive_expiry=5.0, read_timeout=1.5)
    client = connect("127.0.0.1", port, timeout=1.5, outage=policy)
    try:
        client.set("k", b"v")
        _stop(proc)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="did not answer") as caught:
            client.get("k")
        assert caught.value.loss == "silent"
        assert time.monotonic() - started < 8.0
    finally:
        client.close()
        _end(proc)


def _stop(proc: subprocess.Popen[str]) -> None:
    """SIGSTOP, and wait until the kernel shows the process stopped."""
    proc.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_O1_a_killed_server_is_gone_at_the_first_loss() -> None:
    proc, port = _server()
    client = connect("127.0.0.1", port, timeout=30.0)
    try:
        client.set("k", b"v")
        proc.kill()
        proc.wait(10)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as caught:
            client.get("k")
        assert caught.value.loss == "gone"
        assert time.monotonic() - started < 1.0  # not the 30 s of connect retries
    finally:
        client.close()
        _end(proc)
