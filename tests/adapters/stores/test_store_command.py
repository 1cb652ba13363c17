"""``tpelastic store``: a real subprocess serving a real TCPStore."""

from __future__ import annotations

import selectors
import signal
import socket
import subprocess
import sys

import pytest

from tpelastic.adapters.stores import StoreUnavailable, tcp_store


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tpelastic", "store", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise AssertionError(f"no output within {timeout} s")
    return proc.stdout.readline()


def test_serves_until_sigterm_then_exits_zero() -> None:
    proc = _start("--host", "127.0.0.1", "--port", "0")
    try:
        line = _read_line(proc, 20.0)
        assert line.startswith("tpelastic store listening on 127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        client = tcp_store("127.0.0.1", port, is_server=False, timeout=5.0)
        client.set("hello", b"world")
        assert client.get("hello") == b"world"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_sigint_also_exits_zero() -> None:
    proc = _start("--host", "127.0.0.1", "--port", "0")
    try:
        _read_line(proc, 20.0)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_busy_port_is_one_line_and_exit_two() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "tpelastic",
                "store",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert result.returncode == 2
    assert result.stderr.startswith(f"tpelastic: error: cannot listen on 127.0.0.1:{port}")
    assert result.stderr.count("\n") == 1
    assert result.stdout == ""


@pytest.mark.parametrize("port", ["-1", "70000"])
def test_out_of_range_port_is_exit_two(port: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tpelastic", "store", "--port", port],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "--port must be within 0..65535" in result.stderr


def test_secret_file_serves_only_clients_that_prove_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tpelastic.adapters.stores.tcp_client import TcpStoreClient

    secret = tmp_path / "secret"
    secret.write_text("a-store-secret-of-enough-bytes\n")
    proc = _start("--port", "0", "--secret-file", str(secret))
    try:
        port = int(_read_line(proc, 20.0).rsplit(":", 1)[1])
        friend = TcpStoreClient(
            "127.0.0.1", port, timeout=2.0, secret=b"a-store-secret-of-enough-bytes"
        )
        friend.set("k", b"v")
        stranger = TcpStoreClient("127.0.0.1", port, timeout=2.0)
        with pytest.raises(StoreUnavailable):
            stranger.get("k")
        assert friend.get("k") == b"v"
        friend.close()
        stranger.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0


def test_a_short_secret_is_one_line_and_exit_two(tmp_path) -> None:  # type: ignore[no-untyped-def]
    secret = tmp_path / "secret"
    secret.write_text("short")
    result = subprocess.run(
        [sys.executable, "-m", "tpelastic", "store", "--port", "0", "--secret-file", str(secret)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "at least 16" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
