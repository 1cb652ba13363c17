"""A worker failure that the agent sees only after its world ended is no budget unit.

Over our TCPStore with two real DynamicRendezvousHandlers: agent A (the run loop, its workers
stand-ins that report what they are told) trains with peer B; B opens the next round (as a peer
that found A dead during a pause of A would), and only then does A see its workers fail (as they
do once B's are gone). A must re-join the next round, spending nothing, rather than restart its
round in place and charge the failure to the budget.
"""

from __future__ import annotations

import threading

from attempt_helpers import agent_spec, dynamic_handler, run_on_thread

from tpelastic.adapters.agent.loop import SimpleElasticAgent
from tpelastic.adapters.agent.spec import WorkerSpec
from tpelastic.adapters.stores.tcp_server import StoreServer
from tpelastic.adapters.workers.api import ProcessFailure, RunProcsResult


class StandInWorkers(SimpleElasticAgent):
    """The first attempt's workers fail once the world has ended; later ones succeed."""

    def __init__(self, spec: WorkerSpec, world_ended: threading.Event) -> None:
        super().__init__(spec)
        self.world_ended = world_ended
        self.started: list[tuple[str, str]] = []  # (attempt, restart count)
        self.first_started = threading.Event()

    def _start_workers(self, envs: dict[int, dict[str, str]], attempt: str) -> None:
        self.started.append((attempt, envs[0]["TPELASTIC_RESTART_COUNT"]))
        self.first_started.set()

    def _stop_workers(self, reason: str) -> None:
        pass

    def _wait_workers(self, timeout: float) -> RunProcsResult | None:
        if len(self.started) > 1:
            return RunProcsResult(return_values={0: None})
        if not self.world_ended.wait(timeout):
            return None
        failed = ProcessFailure(local_rank=0, pid=1, exitcode=1, timestamp=0.0)
        return RunProcsResult(failures={0: failed})


def test_a_failure_seen_after_the_next_round_opened_rejoins_without_a_unit(
    server: StoreServer,
) -> None:
    ended = threading.Event()
    spec = agent_spec(dynamic_handler(server.port, "ended", "a"), exit_barrier_timeout=1.0)
    agent = StandInWorkers(spec, ended)
    peer = dynamic_handler(server.port, "ended", "b")
    run, outcome = run_on_thread(agent)
    try:
        peer.next_rendezvous()
        assert agent.first_started.wait(20)
        peer.open_next_round("membership")  # the world of round 0 ends
        ended.set()
        peer.next_rendezvous()  # round 1, with A
        run.join(30)
    finally:
        peer.shutdown()
    assert outcome, "the agent did not finish"
    assert agent.started == [("r0", "0"), ("r1", "0")]
    assert outcome[0].restart_count == 0
