"""The simulator's liveness property (pure): never give up while the job can go on, never hang.

A run is judged at its end, after the faults stopped and :func:`settle_time` passed:

* once the rendezvous is closed (a terminal outcome: an agent whose budget is spent failed the
  job, or the job ended), every node that is up has ended;
* otherwise, when the store answers and at least ``min_nodes`` nodes are up (not crashed, not
  left), every node that is up trains in one round (up to ``max_nodes`` of them; the rest may
  still join); none gave up (its agent ended: with budget left that is always wrong, and with
  the budget spent the agent closes the rendezvous for everyone), none is joining or holding;
* otherwise (the store is gone for good, or too few nodes are up) every node that is up has
  ended (failed with its reason) or trains in a round: none joins or holds for ever.
"""

from __future__ import annotations

from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.sim.cluster import Cluster
from tpelastic.core.sim.nodes import Status

_GONE = (Status.CRASHED, Status.LEFT)
_STUCK = (Status.JOINING, Status.HOLDING, Status.FENCED)


def settle_time(config: RendezvousConfig, latency: float = 0.0, retry_after: float = 0.0) -> float:
    """Virtual seconds after the last fault within which a live run must have settled.

    The longest chain of waits after the store answers again, each starting when the one
    before ended (specs/simulation.md, S1): the retry of a join the outage cut (``retry_after``);
    a follower's takeover of a closer that crashed after opening the round
    (``takeover_delay``); the declaration of the previous round's crashed members, whose
    clock starts at the takeover's first look (``heartbeat_timeout``); the last call; the
    ring finding a member that crashed after arriving, which the round admitted (one beat
    interval to its first sighting, the timeout, a beat interval to the look that sees it);
    and the join that then cannot complete (``join_timeout``). Round trips and wake-ups take
    the latencies, and 5 s of slack absorb the float rounding of the beat ticks.
    """
    return (
        retry_after
        + config.takeover_delay
        + config.heartbeat_timeout
        + config.last_call_timeout
        + config.heartbeat_timeout
        + 2 * config.heartbeat_interval
        + config.join_timeout
        + 100 * latency
        + 5.0
    )


def liveness_problems(cluster: Cluster) -> list[str]:
    """What breaks the property at the cluster's present instant (empty: it holds)."""
    config = cluster.config
    up = [node for node in cluster.nodes.values() if node.status not in _GONE]
    if cluster.keys.closed() in cluster.store:
        return [
            f"{node.name} is {node.status.value} after the close"
            for node in up
            if node.status is not Status.FAILED
        ]
    store_answers = cluster.store_up and cluster.now >= cluster.store_paused_until
    problems: list[str] = []
    if store_answers and len(up) >= config.min_nodes:
        for node in up:
            if node.retry_pending:
                problems.append(f"{node.name} still retries the store")
            elif node.status is Status.FAILED and not node.failure.startswith("closed"):
                used = f"{node.agent.restart_count} of {cluster.agent_config.max_restarts}"
                budget = "budget left" if cluster.budget_left(node) else "the budget spent"
                problems.append(
                    f"{node.name} gave up ({node.failure}) with {len(up)} nodes up and "
                    f"{budget} ({used} restarts used)"
                )
            elif node.status in _STUCK:
                problems.append(f"{node.name} is {node.status.value} for ever")
        training = [node for node in up if node.status is Status.TRAINING]
        rounds = {node.world.round_no for node in training if node.world is not None}
        if len(rounds) > 1:
            problems.append(f"nodes train in rounds {sorted(rounds)} at once")
        wanted = min(len(up), config.max_nodes)
        if len(training) < wanted and not problems:
            problems.append(f"{len(training)} of {wanted} nodes train")
        if len(training) == wanted and len(up) > wanted:  # the rest wait: that is fine
            problems = [p for p in problems if "joining" not in p]
        return problems
    for node in up:
        if node.status in _STUCK:
            problems.append(f"{node.name} is {node.status.value} for ever (nothing can go on)")
        elif node.retry_pending:
            problems.append(f"{node.name} retries the store for ever (nothing can go on)")
    return problems


__all__ = ["liveness_problems", "settle_time"]
