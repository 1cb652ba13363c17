"""What the agent's adapter tests share: entering an in-place attempt the way the run loop does
(its endpoint wait stepped to the end), and a two-node run of one real agent beside a peer
handler over our TCPStore (the handlers, the spec, the agent's run on a thread)."""

from __future__ import annotations

import threading
from typing import Any

from attrs import evolve

from tpelastic.adapters.agent.in_place import EndpointWait, Look
from tpelastic.adapters.agent.loop import SimpleElasticAgent
from tpelastic.adapters.agent.membership import Membership
from tpelastic.adapters.agent.spec import RunResult, WorkerSpec
from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.stores.tcp_client import connect
from tpelastic.core import agent as core
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.rendezvous import DynamicRendezvousHandler, P10dRendezvousBackend

# Two nodes that form rounds quickly and find nobody dead: a test's peer acts on its own.
TWO_NODES = RendezvousConfig(
    min_nodes=2,
    max_nodes=2,
    join_timeout=20.0,
    last_call_timeout=0.3,
    heartbeat_interval=0.3,
    heartbeat_timeout=10.0,
)


def never(now: float) -> None:
    """A look that never has news."""
    return None


def enter(m: Membership, attempt: int, count: int, look: Look = never) -> Any:
    """Move ``m`` to ``attempt`` and step its endpoint wait, one slice a pass, as the loop does.

    Returns:
        The attempt's ``Joined``; the look's news, or ``RendezvousFailed`` (timeout).
    """
    joined = m.enter_attempt(attempt)
    if joined is not None:
        return joined
    assert m.joined is not None
    facts = m.joined.facts
    effect = core.StartWorkers(
        round=facts.round,
        group_rank=facts.group_rank,
        group_world_size=facts.group_world_size,
        restart_count=count,
        local_world_size=1,
        attempt=attempt,
    )
    wait = EndpointWait(m, effect, SYSTEM_CLOCK, m.bootstrap_timeout)
    while (outcome := wait.step(look)) is None:
        pass
    return outcome


def dynamic_handler(
    port: int,
    run_id: str,
    node: str,
    *,
    config: RendezvousConfig = TWO_NODES,
    cls: type[DynamicRendezvousHandler] = DynamicRendezvousHandler,
) -> Any:
    """A real handler of ``run_id`` as ``node`` over the TCPStore at ``port``."""
    store = P10dRendezvousBackend(connect("127.0.0.1", port, timeout=5.0))
    return cls(run_id, store, config, backend_name="tcp", node_id=node, local_addr="127.0.0.1")


def agent_spec(handler: Any, **changes: Any) -> WorkerSpec:
    """One local worker of role ``trainer`` in a two-node job over ``handler``."""
    spec = WorkerSpec(
        role="trainer",
        local_world_size=1,
        rdzv_handler=handler,
        entrypoint="unused",
        max_restarts=3,
        min_nodes=2,
        max_nodes=2,
    )
    return evolve(spec, **changes)


def run_on_thread(agent: SimpleElasticAgent) -> tuple[threading.Thread, list[RunResult]]:
    """Start ``agent.run()`` on a daemon thread; its result lands in the returned list."""
    outcome: list[RunResult] = []
    run = threading.Thread(target=lambda: outcome.append(agent.run()), daemon=True)
    run.start()
    return run, outcome
