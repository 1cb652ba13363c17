"""A join runs on its pump, not on the loop's thread: a stop signal during a join that cannot
complete (one node of two) ends the agent at once, over a real DynamicRendezvousHandler on our
TCPStore. The agent runs on this (the main) thread, where its signal policy is installed."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from attempt_helpers import agent_spec, dynamic_handler

from tpelastic.adapters.agent.loop import SimpleElasticAgent
from tpelastic.adapters.stores.tcp_server import StoreServer
from tpelastic.adapters.workers.api import RunProcsResult
from tpelastic.core.rendezvous.config import RendezvousConfig


class NoWorkers(SimpleElasticAgent):
    """No round completes here, so no worker is ever started."""

    def _start_workers(self, envs: dict[int, dict[str, str]], attempt: str) -> None:
        raise AssertionError("no round completes with one node of two")

    def _stop_workers(self, reason: str) -> None:
        pass

    def _wait_workers(self, timeout: float) -> RunProcsResult | None:
        return None


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="signal handlers are installed on the main thread only",
)
def test_a_stop_signal_during_a_join_ends_the_agent_at_once(server: StoreServer) -> None:
    config = RendezvousConfig(min_nodes=2, max_nodes=2, join_timeout=60.0, heartbeat_interval=0.3)
    handler = dynamic_handler(server.port, "join-pump", "a", config=config)
    spec = agent_spec(handler, max_restarts=0)
    agent = NoWorkers(spec)
    sender = threading.Timer(1.0, os.kill, args=(os.getpid(), signal.SIGTERM))
    sender.start()
    started = time.monotonic()
    try:
        result = agent.run()
    finally:
        sender.cancel()
    assert result.exit_code == 128 + signal.SIGTERM
    assert time.monotonic() - started < 20.0  # the join alone would wait 60 s
    assert not [t for t in threading.enumerate() if t.name.startswith("tpelastic-join-")]
