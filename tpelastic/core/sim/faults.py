"""Process, store and network faults of the simulator beyond the cluster's own (pure).

* :func:`pause_node` / :func:`resume_node`: the node's process stops (SIGSTOP) and resumes. While
  stopped it sends nothing, its heartbeats stop landing, its timers and looks wait; when it
  resumes its clock has jumped: a node whose last good beat is older than the fence margin
  fences itself at once, any other looks at its round straight away.
* :func:`pause_store` / :func:`resume_store`: the store's process stops: batches are not refused
  but wait (their replies come one latency after the resume); nobody's beat lands meanwhile.
* :func:`store_host_dies`: the node that hosts the store dies, and the store with it, for good.
* :func:`delay_messages`: every batch of every node takes ``extra`` more seconds (0 ends it).

Only a training node can be paused: a paused joining node would need the join driver to hold
the join machine's events until the resume, which the simulator does not model.
"""

from __future__ import annotations

from tpelastic.core.sim.cluster import Cluster
from tpelastic.core.sim.nodes import Status


def pause_node(cluster: Cluster, name: str) -> None:
    """Stop the node's process (it must be training)."""
    node = cluster.nodes[name]
    if node.status is not Status.TRAINING:
        raise ValueError(f"node {name} is not training; only a training node can be paused")
    if node.paused:
        return  # stopped already: the first resume continues it
    node.paused = True
    node.beating_before_pause = node.beating
    node.beating = False
    cluster._note(node, "node.paused", f"{name} is stopped")


def resume_node(cluster: Cluster, name: str) -> None:
    """Resume a paused node: its late timers fire now."""
    node = cluster.nodes[name]
    if not node.paused:
        return
    node.paused = False
    node.beating = node.beating_before_pause
    cluster._note(node, "node.resumed", f"{name} resumed")
    if node.status is Status.TRAINING and node.world is not None:
        # Its clock jumped: the membership machine reads its keep-alive (a lapse fences it and
        # it re-joins at once, specs/agent.md A12); a node still training looks at its round.
        cluster._read_keep_alive(node)
        if node.status is Status.TRAINING and node.failed_while_paused:
            cluster._workers_failed(node, "workers failed")
        if node.status is Status.TRAINING and node.world is not None:
            cluster._watch(node, node.world)
    node.failed_while_paused = False
    cluster._arm_tick(node)
    cluster._settle()


def pause_store(cluster: Cluster, seconds: float) -> None:
    """The store's process stops for ``seconds``: batches wait, no beat lands."""
    if seconds <= 0:
        raise ValueError(f"a store pause lasts > 0 seconds, got {seconds}")
    cluster.store_paused_until = max(cluster.store_paused_until, cluster.now + seconds)
    cluster._note(None, "store.paused", f"the store is stopped for {seconds:g}s")
    for node in cluster.nodes.values():
        cluster._arm_fence(node)
    cluster.queue.schedule(cluster.store_paused_until, lambda: resume_store(cluster))
    cluster._settle()


def resume_store(cluster: Cluster) -> None:
    """The paused store answers again (the batches it held get their replies)."""
    if cluster.now < cluster.store_paused_until:
        return  # a later pause extended this one
    cluster._note(None, "store.resumed", "the store answers again")
    cluster._settle()


def store_host_dies(cluster: Cluster, name: str) -> None:
    """The node hosting the store crashes: the store is gone for good."""
    cluster._note(cluster.nodes[name], "store.host_died", f"{name}, the store's host, died")
    cluster.store_gone = True  # nothing listens at its address: connections are refused
    cluster.crash(name)
    cluster.store_unavailable()


def delay_messages(cluster: Cluster, extra: float) -> None:
    """Every batch takes ``extra`` more seconds from now on (0 ends the delay)."""
    if extra < 0:
        raise ValueError(f"a message delay is >= 0, got {extra}")
    cluster.message_delay = extra
    cluster._note(None, "net.delay", f"messages take {extra:g}s more")


__all__ = [
    "delay_messages",
    "pause_node",
    "pause_store",
    "resume_node",
    "resume_store",
    "store_host_dies",
]
