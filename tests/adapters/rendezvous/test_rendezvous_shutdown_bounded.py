"""A node that is going does not wait on its store: shutdown is bounded when the store is gone
or paused (specs/exit.md X2). The store is a real ``tpelastic store`` process, stopped or killed.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tpelastic.adapters.rendezvous.dynamic import SHUTDOWN_BUDGET
from tpelastic.adapters.rendezvous.parameters import RendezvousParameters
from tpelastic.rendezvous import create_handler


@pytest.fixture
def store_process() -> Iterator[tuple[subprocess.Popen[str], int]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tpelastic", "store", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    assert ready.startswith("tpelastic store listening on"), ready
    yield proc, int(ready.rsplit(":", 1)[1])
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
    proc.wait(10)


@pytest.mark.parametrize("fault", [signal.SIGSTOP, signal.SIGKILL], ids=["paused", "killed"])
def test_X2_shutdown_is_bounded_when_the_store_is_paused_or_gone(
    fault: signal.Signals, store_process: tuple[subprocess.Popen[str], int]
) -> None:
    proc, port = store_process
    params = RendezvousParameters(
        "c10d",
        f"127.0.0.1:{port}",
        "bounded-shutdown",
        1,
        2,
        "127.0.0.1",
        is_host="false",
        read_timeout=60,
        join_timeout=20,
        last_call_timeout=0.2,
        keep_alive_interval=5,
    )
    handler = create_handler(params)
    info = handler.next_rendezvous()
    assert info.world_size == 1
    proc.send_signal(fault)
    started = time.monotonic()
    assert handler.shutdown() is False  # the leave could not be written
    spent = time.monotonic() - started
    # Without the bound: the 60 s read timeout (paused) or the 15 s expiry (killed).
    assert spent < SHUTDOWN_BUDGET + 1.5, spent
