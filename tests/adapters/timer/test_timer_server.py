"""TimerServer bookkeeping with an in-memory request queue and injected times; expires()."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tpelastic.timer import (
    TIMER_FILE_ENV,
    FileTimerClient,
    TimerRequest,
    TimerServer,
    configure,
    expires,
    get_default_client,
)


class ListQueue:
    """A RequestQueue holding requests in a list: the transport is not what is tested here."""

    def __init__(self):
        self.pending: list[TimerRequest] = []

    def get(self, size, timeout):
        out, self.pending = self.pending[:size], self.pending[size:]
        return out


class Recorder:
    """A TimerClient that keeps what it was asked, so expires() can be checked on its own."""

    def __init__(self):
        self.calls = []

    def acquire(self, scope_id, expiration_time):
        self.calls.append(("acquire", scope_id, expiration_time))

    def release(self, scope_id):
        self.calls.append(("release", scope_id))


def sleeper():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_expired_worker_is_killed_and_reported_and_released_one_is_not():
    queue, reports = ListQueue(), []
    server = TimerServer(queue, max_interval=0.01, on_expired=reports.append)
    late, punctual = sleeper(), sleeper()
    try:
        queue.pending = [
            TimerRequest(worker_id=late.pid, scope_id="step", expiration_time=10.0),
            TimerRequest(worker_id=punctual.pid, scope_id="step", expiration_time=10.0),
            TimerRequest(worker_id=punctual.pid, scope_id="step", release=True),
        ]
        assert server.run_once(now=9.9) == []  # not yet due
        [expired] = server.run_once(now=10.0)
        assert (expired.worker_id, expired.scopes, expired.killed) == (late.pid, ("step",), True)
        assert reports == [expired]
        assert late.wait(timeout=10) == -signal.SIGKILL
        assert punctual.poll() is None
        assert server.run_once(now=100.0) == []  # the late worker's timers were cleared
    finally:
        for p in (late, punctual):
            p.kill()
            p.wait(timeout=10)


def test_configurable_signal_and_already_gone_worker():
    queue = ListQueue()
    server = TimerServer(queue, max_interval=0.01, kill_signal=signal.SIGTERM)
    proc = sleeper()
    queue.pending = [TimerRequest(worker_id=proc.pid, scope_id="a", expiration_time=1.0)]
    assert server.run_once(now=2.0)[0].signal == signal.SIGTERM
    assert proc.wait(timeout=10) == -signal.SIGTERM
    queue.pending = [TimerRequest(worker_id=proc.pid, scope_id="b", expiration_time=1.0)]
    assert server.run_once(now=2.0)[0].killed is False  # reaped already: nothing to kill


def test_server_never_kills_itself_and_survives_a_broken_callback():
    def broken(_):
        raise RuntimeError("callback bug")

    queue = ListQueue()
    server = TimerServer(queue, max_interval=0.01, on_expired=broken)
    queue.pending = [TimerRequest(worker_id=os.getpid(), scope_id="self", expiration_time=0.0)]
    [expired] = server.run_once(now=1.0)
    assert expired.killed is False


def test_expires_acquires_then_releases_even_on_error():
    client = Recorder()
    with pytest.raises(KeyError), expires(after=5, scope="blk", client=client):
        raise KeyError("boom")
    (op1, scope1, deadline), (op2, scope2) = client.calls
    assert (op1, scope1, op2, scope2) == ("acquire", "blk", "release", "blk")


def test_expires_default_scope_names_the_caller_and_default_client_is_used():
    client = Recorder()
    configure(client)
    try:
        with expires(after=1):
            pass
    finally:
        configure(None)
    assert __file__ in client.calls[0][1]


def test_expires_bad_arguments_and_missing_client(monkeypatch):
    with pytest.raises(ValueError, match="after must be > 0"):
        expires(after=0, client=Recorder())
    monkeypatch.delenv(TIMER_FILE_ENV, raising=False)
    configure(None)
    with pytest.raises(RuntimeError, match="no timer client"):
        get_default_client()


def test_default_client_follows_the_environment(monkeypatch, tmp_path):
    configure(None)
    monkeypatch.setenv(TIMER_FILE_ENV, str(tmp_path / "t.fifo"))
    try:
        client = get_default_client()
        assert isinstance(client, FileTimerClient) and client.path == str(tmp_path / "t.fifo")
    finally:
        configure(None)


def test_bad_max_interval():
    with pytest.raises(ValueError, match="max_interval must be > 0"):
        TimerServer(ListQueue(), max_interval=0)
