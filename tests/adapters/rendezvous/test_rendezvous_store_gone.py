"""A join waiting for its round when the store's process dies fails once the outage is waited
out, with the one line naming the fix, not at its join deadline (specs/store_outage.md O8).
The store is a real ``tpelastic store`` process, killed."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from tpelastic.adapters.rendezvous.errors import RendezvousConnectionError
from tpelastic.adapters.rendezvous.parameters import RendezvousParameters
from tpelastic.rendezvous import create_handler


def test_O8_a_waiting_join_fails_when_the_store_is_gone_not_at_its_deadline() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tpelastic", "store", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert ready.startswith("tpelastic store listening on"), ready
        port = int(ready.rsplit(":", 1)[1])
        params = RendezvousParameters(
            "c10d",
            f"127.0.0.1:{port}",
            "join-store-gone",
            2,  # waits for a second node that never comes
            2,
            "127.0.0.1",
            is_host="false",
            join_timeout=60,
            keep_alive_interval=0.5,
            keep_alive_max_attempt=3,
        )
        handler = create_handler(params)
        outcome: list[BaseException] = []

        def join() -> None:
            try:
                handler.next_rendezvous()
            except BaseException as error:
                outcome.append(error)

        joiner = threading.Thread(target=join, daemon=True)
        joiner.start()
        time.sleep(1.5)  # arrived, waiting for the round to fill
        assert joiner.is_alive()
        proc.kill()
        killed = time.monotonic()
        joiner.join(40)
        spent = time.monotonic() - killed
        assert not joiner.is_alive(), "still joining"
        assert isinstance(outcome[0], RendezvousConnectionError), outcome
        text = str(outcome[0])
        assert "is gone" in text and "tpelastic store" in text and "\n" not in text
        # The expiry (1.5 s) plus room for a loaded machine; the join deadline was 60 s.
        assert spent < 10.0, spent
        handler.shutdown()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
