"""The workers' end reported just before an in-place attempt stopped them is not the attempt's.

Over our TCPStore with two real DynamicRendezvousHandlers: agent A (the run loop; its workers
are stand-ins whose end the test decides) trains with peer B. While A's loop is held in one of
its periodic reads, B opens attempt 1 (A's round watcher reports it) and A's workers finish (the
pump reports their success): both wait in A's inbox. A must stop its workers for the attempt and
start the attempt's, still running: the queued success belonged to the workers it stopped. Taken
for the attempt's workers, it sent A to an exit barrier of the old attempt while B waited in the
new one's: a two-node run after a crash restarted in place never finished.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from attempt_helpers import agent_spec, dynamic_handler, run_on_thread

from tpelastic.adapters.agent.loop import SimpleElasticAgent
from tpelastic.adapters.agent.spec import WorkerSpec
from tpelastic.adapters.stores.tcp_server import StoreServer
from tpelastic.adapters.workers.api import RunProcsResult
from tpelastic.core import agent as core
from tpelastic.rendezvous import DynamicRendezvousHandler


class HeldReads(DynamicRendezvousHandler):
    """Holds the agent's loop in its next keep-alive read once ``hold`` is armed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hold = threading.Event()
        self.held = threading.Event()
        self.release = threading.Event()

    def keep_alive_last_beat(self) -> float | None:
        if self.hold.is_set() and not self.held.is_set():
            self.held.set()
            self.release.wait(20)
        return super().keep_alive_last_beat()


class StandInWorkers(SimpleElasticAgent):
    """The first start's workers succeed once ``finish`` is set; later starts run on."""

    def __init__(self, spec: WorkerSpec) -> None:
        super().__init__(spec)
        self.finish = threading.Event()
        self.started: list[str] = []
        self.start_seen = threading.Condition()

    def _start_workers(self, envs: dict[int, dict[str, str]], attempt: str) -> None:
        with self.start_seen:
            self.started.append(attempt)
            self.start_seen.notify_all()

    def _stop_workers(self, reason: str) -> None:
        pass

    def _wait_workers(self, timeout: float) -> RunProcsResult | None:
        first = len(self.started) == 1
        if first and self.finish.wait(timeout):
            return RunProcsResult(return_values={0: None})
        time.sleep(timeout)
        return None

    def wait_started(self, count: int, timeout: float) -> bool:
        with self.start_seen:
            return self.start_seen.wait_for(lambda: len(self.started) >= count, timeout)


def test_a_success_queued_before_the_attempt_stopped_the_workers_is_stale(
    server: StoreServer,
) -> None:
    mine: HeldReads = dynamic_handler(server.port, "stale", "a", cls=HeldReads)
    spec = agent_spec(mine, monitor_interval=0.1, exit_barrier_timeout=5.0)
    agent = StandInWorkers(spec)
    peer = dynamic_handler(server.port, "stale", "b")
    run, outcome = run_on_thread(agent)
    try:
        peer.next_rendezvous()
        assert agent.wait_started(1, 20), agent.started
        mine.hold.set()
        assert mine.held.wait(20), "the loop never read its keep-alive"
        peer.open_attempt("worker local rank 0 failed", attempt=1)
        time.sleep(0.5)  # A's round watcher puts "round changed" in its inbox
        agent.finish.set()
        time.sleep(0.5)  # A's worker pump puts the first start's success after it
        mine.release.set()
        peer.follow_attempt(1)
        peer.attempt_info(timeout=10.0)  # rank 0 publishes; rank 1 reads A's endpoint
        assert agent.wait_started(2, 20), agent.started
        time.sleep(0.5)  # a stale success would be stepped by now
        assert agent.started == ["r0", "r0a1"]
        assert agent.state.phase is core.AgentPhase.RUNNING, agent.state
        assert agent.state.attempt == 1
        peer.set_closed("succeeded", "the test is over")
        run.join(30)
    finally:
        mine.release.set()
        peer.shutdown()
    assert outcome, "the agent did not finish"
