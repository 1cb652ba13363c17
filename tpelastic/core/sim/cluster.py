"""A rendezvous cluster in virtual time: N nodes run the product's core over a simulated store.

This is the harness the property tests, the scenario runner and the timeline demo drive. Every
node steps the same :func:`tpelastic.core.rendezvous.join.step` and the same composed core
(:func:`tpelastic.core.node.node_step`: membership machine, agent table, restart budget) the
adapters run, never a reimplementation; only the store (a dict, each batch applied atomically),
the network (a per-batch latency) and time (a heap of actions, :mod:`tpelastic.core.sim.queue`)
are simulated. Between rounds a member heartbeats, holds its round watcher's wait on the watch
keys (``membership.watch_ops``: the close, the next round's opened and arrivals, the round's
next attempt) and looks once per heartbeat interval (the same keys, and its ring successor's
heartbeat); what a look means, what a lapsed keep-alive means and what a worker failure costs
are its core's decisions (:mod:`tpelastic.core.sim.agents`).

Driving the join machine itself (store batches, latency, waits, connection failures) is
:mod:`tpelastic.core.sim.joining`; restarts in place and the held waits are
:mod:`tpelastic.core.sim.restarting`; the node's core and its effects are
:mod:`tpelastic.core.sim.agents`; virtual time is :mod:`tpelastic.core.sim.queue`.
"""

from __future__ import annotations

import math
from functools import lru_cache

from attrs import define, field

from tpelastic.core import agent as ag
from tpelastic.core import membership as mb
from tpelastic.core.membership import keep_alive_lapsed
from tpelastic.core.rendezvous import membership
from tpelastic.core.rendezvous.ops import Get, Op, Reply
from tpelastic.core.rendezvous.records import RoundResult, decode_counter
from tpelastic.core.sim.agents import AgentDriver
from tpelastic.core.sim.joining import MAX_STEPS_WITHOUT_WAITING
from tpelastic.core.sim.nodes import SimNode, SimRecord, Status
from tpelastic.core.sim.queue import SimulationStuck
from tpelastic.core.sim.restarting import MEMBER

__all__ = [
    "MAX_STEPS_WITHOUT_WAITING",
    "Cluster",
    "SimNode",
    "SimRecord",
    "SimulationStuck",
    "Status",
]


# What a look at the next round says depends only on the three replies (immutable bytes), and at
# a given moment every member sees the same ones: decode each distinct answer once.
_read_watch = lru_cache(maxsize=256)(membership.read_watch)
SIGTERM = 15  # what a graceful leave is to the agent (the core imports no signal module)


@define
class Cluster(AgentDriver):
    """All nodes of one run. Every method is deterministic; time moves only in :meth:`advance`.

    Attributes (see :class:`~tpelastic.core.sim.joining.JoinDriver` and
    :class:`~tpelastic.core.sim.restarting.RestartDriver` for all of them):
        latency: seconds from sending a store batch to its replies (and from a key's arrival to
            the wake-up of a wait on it).
        retry_after: after a join fails to reach the store, the agent rejoins this many seconds
            later; None means it exits (status FAILED).
        detail: keep per-node log lines and records (turn off for very large runs).
        restart_in_place: a worker failure restarts the round's workers as its next attempt
            (True) or re-forms the round (False).
    """

    # Batches that are the same values for every node, or for a node for a whole round, built
    # once: (round, attempt) -> the watch batch; node -> its heartbeat batch.
    _watch_ops: dict[tuple[int, int], tuple[Op, ...]] = field(factory=dict, alias="_watch_ops")
    _beat_ops: dict[str, tuple[Op, ...]] = field(factory=dict, alias="_beat_ops")
    # The last held look's answer: (round, attempt, store ops so far) -> what it read.
    _held_looks: dict[tuple[int, int, int], membership.RoundWatch] = field(
        factory=dict, alias="_held_looks"
    )

    def start(self, name: str) -> None:
        """A new node (or a restarted one, under a new name) joins the run."""
        if name in self.nodes:
            raise ValueError(f"node {name} exists")
        node = SimNode(name=name, last_beat=self.now, last_good_beat=self.now)
        self.nodes[name] = node
        self._note(node, "node.started", f"{name} started")
        self._send_beat(node)
        self._step(node, ag.AgentStarted(now=self.now))
        self._settle()

    def crash(self, name: str) -> None:
        """The node dies without a goodbye: no more heartbeats, no more steps."""
        node = self.nodes[name]
        world = node.world if node.status is Status.TRAINING else None
        self._set_status(node, Status.CRASHED, None)
        self._drop_wait(node)
        node.beating = False
        node.gen += 1
        self._note(node, "node.crashed", f"{name} crashed")
        if world is not None and self.peer_loss_fails_workers:
            self._fail_peers_of(world, name)
        self._settle()

    def _fail_peers_of(self, world: RoundResult, lost: str) -> None:
        """The workers of every peer training in ``world`` fail on the lost peer's connection."""
        peers = [self.nodes[p.node] for p in world.participants if p.node != lost]
        round_no = world.round_no

        def fail() -> None:
            for peer in peers:
                same = peer.world is not None and peer.world.round_no == round_no
                if peer.status is Status.TRAINING and same and not peer.paused:
                    self._note(peer, "workers.failed", f"{peer.name} workers failed ({lost} lost)")
                    self._workers_failed(peer, f"connection closed by peer ({lost})")

        self.queue.schedule(self.now + self.peer_loss_delay, fail)

    def leave(self, name: str) -> None:
        """A graceful leave of a training member: the others form a new round without it."""
        node = self.nodes[name]
        if node.status is not Status.TRAINING or node.world is None:
            raise ValueError(f"node {name} is not training; only a member can leave")
        self._note(node, "node.left", f"{name} left gracefully")
        self._signalled(node, SIGTERM)  # the agent leaves the rendezvous and ends
        node.beating = False
        self._settle()

    def fail_workers(self, name: str) -> None:
        """The node's workers failed: its agent decides (with budget left it opens the next
        attempt of its round and every member restarts in place, or with ``restart_in_place``
        off it reports the failure and rejoins; with the budget spent the job fails)."""
        node = self.nodes[name]
        world = node.world
        if node.status is not Status.TRAINING or world is None:
            raise ValueError(f"node {name} is not training; only a member's workers can fail")
        self._note(
            node,
            "workers.failed",
            f"{name} workers failed",
            round=world.round_no,
            attempt=node.attempt,
        )
        if node.paused:  # a stopped agent sees its workers' exits when it resumes
            node.failed_while_paused = True
            return
        self._workers_failed(node, "workers failed")
        self._settle()

    def lose_heartbeats(self, name: str) -> None:
        """The node keeps running but its heartbeats stop landing (its link to the store broke)."""
        node = self.nodes[name]
        node.beating = False
        self._note(node, "node.heartbeats_lost", f"{name} lost its heartbeats")
        self._arm_fence(node)
        self._settle()

    def partition(self, name: str) -> None:
        """Cut the node off the store: its batches and heartbeats fail until :meth:`heal`."""
        node = self.nodes[name]
        node.partitioned = True
        self._note(node, "node.partitioned", f"{name} is cut off from the store")
        self._cut_off([node])
        self._settle()

    def heal(self, name: str) -> None:
        """End a partition of the node (a join it retries reaches the store again)."""
        node = self.nodes[name]
        node.partitioned = False
        self._note(node, "node.healed", f"{name} reaches the store again")
        self._settle()

    def store_unavailable(self) -> None:
        """The store stops answering: every batch and heartbeat fails until it is back."""
        self.store_up = False
        self._note(None, "store.unavailable", "the store is unavailable")
        self._cut_off(list(self.nodes.values()))
        self._settle()

    def store_available(self) -> None:
        """The store answers again (joins being retried reach it), unless its host died."""
        if self.store_gone:
            return  # nothing listens at its address any more
        self.store_up = True
        self._note(None, "store.available", "the store is available again")
        self._settle()

    def slow(self, name: str, extra_latency: float) -> None:
        """Every batch of this node takes ``extra_latency`` more seconds (0 ends the slowness)."""
        if extra_latency < 0:
            raise ValueError(f"extra_latency must be >= 0, got {extra_latency}")
        node = self.nodes[name]
        node.extra_latency = extra_latency
        self._note(
            node, "node.slow", f"{name} is slower by {extra_latency:g}s", extra=extra_latency
        )

    def fence_deadline(self, node: SimNode) -> float:
        """Past this instant a node whose heartbeats fail may not train: peers may soon declare it
        dead (they need ``heartbeat_timeout`` since its last good beat), so it fences first."""
        config, last = self.config, node.last_good_beat
        deadline = last + (config.heartbeat_timeout - config.heartbeat_interval)
        # The first instant the membership machine's own arithmetic calls it lapsed (a float
        # sum can fall one ulp short of it, and a check at that instant would find nothing).
        while not keep_alive_lapsed(
            deadline, last, config.heartbeat_timeout, config.heartbeat_interval
        ):
            deadline = math.nextafter(deadline, math.inf)
        return deadline

    def close(self, name: str, outcome: str = "succeeded") -> None:
        node = self.nodes[name]
        forming = (node.world.round_no + 1) if node.world else node.join.round_no
        self._send(node, membership.close_ops(self.keys, forming, outcome, f"closed by {name}"))
        self._note(node, "rendezvous.closed", f"{name} closed the rendezvous ({outcome})")
        self._settle()

    # --- time ----------------------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Move virtual time forward, running heartbeats, watches, replies and deadlines in order.

        Raises:
            ValueError: for a negative duration.
            SimulationStuck: when the machines loop without time moving (a bug).
        """
        if seconds < 0:
            raise ValueError(f"cannot advance by a negative duration ({seconds})")
        self.queue.run_until(self.now + seconds, self._limit())

    def _arm_tick(self, node: SimNode) -> None:
        if not node.ticking:
            node.ticking = True
            at = node.last_beat + self.config.heartbeat_interval
            self.queue.schedule(at, lambda: self._tick(node))

    def _tick(self, node: SimNode) -> None:
        node.ticking = False
        if node.paused:  # its timers fire when it resumes (faults.resume_node re-arms them)
            return
        # An agent waiting to retry a join keeps its keep-alive running, as the real one does.
        retrying = node.status is Status.FAILED and node.retry_pending
        if node.status not in (Status.JOINING, Status.FENCED, *MEMBER) and not retrying:
            return
        node.last_beat = self.now
        if node.beating:
            self._send_beat(node)
        elif node.status is Status.FENCED:
            self._fenced_beat(node, False)
        looks = node.status in MEMBER and not node.retry_pending  # (not while an open retries)
        if looks and node.beating and node.world is not None:
            self._watch(node, node.world)
        self._arm_tick(node)

    def _send_beat(self, node: SimNode) -> None:
        sent = self.now

        def landed(replies: tuple[Reply, ...] | None) -> None:
            if replies is None:
                self._arm_fence(node)
            else:
                node.last_good_beat = max(node.last_good_beat, sent)
            if node.status is Status.FENCED and not node.paused:
                self._fenced_beat(node, replies is not None)

        ops = self._beat_ops.get(node.name)
        if ops is None:
            ops = self._beat_ops[node.name] = membership.heartbeat_ops(
                self.keys, node.name, self.config
            )
        self._request(node, ops, landed, stale_ok=True)

    def _fenced_beat(self, node: SimNode, landed: bool) -> None:
        """A fenced node's beat: one that failed after its store client waited the outage out
        is a failed look (the rendezvous is lost); otherwise its keep-alive is read (a landed
        beat ends the fence and it re-joins; a lapse past the join timeout fails it)."""
        if not landed and node.store_lost:
            self._step(node, mb.LookFailed(now=self.now, reason=node.store_lost))
        else:
            self._read_keep_alive(node)

    def _arm_fence(self, node: SimNode) -> None:
        if node.status is Status.TRAINING:
            self.queue.schedule(self.fence_deadline(node), lambda: self._fence_if_due(node))

    def _heart_failing(self, node: SimNode) -> bool:
        paused_store = self.now < self.store_paused_until  # its beats hang, none lands
        return not node.beating or not self._reachable(node) or paused_store

    def _heartbeats_held(self, node: SimNode) -> bool:
        # The adapter's rule (keep_alive_healthy): the last beat that landed is recent enough
        # that no peer can have declared the node dead.
        return self.now < self.fence_deadline(node)

    def _fence_if_due(self, node: SimNode) -> None:
        if node.paused:  # a stopped process checks nothing; it looks when it resumes
            return
        if node.status is Status.TRAINING and self._heart_failing(node):
            self._read_keep_alive(node)  # the membership machine decides whether it lapsed
            if node.status is Status.TRAINING:
                self._arm_fence(node)

    def _watch(self, node: SimNode, world: RoundResult) -> None:
        successor = membership.ring_successor(world, node.name)
        attempt = node.attempt
        ops = self._watch_batch(world.round_no, attempt)
        if successor is not None:
            ops += (Get(self.keys.heartbeat(successor)),)

        def seen(replies: tuple[Reply, ...] | None) -> None:
            if node.status not in MEMBER or node.world is not world:
                return
            if replies is None:
                self._look_failed(node)
            else:
                self._after_watch(node, world, replies, successor, attempt)

        self._request(node, ops, seen)

    def _watch_batch(self, round_no: int, attempt: int) -> tuple[Op, ...]:
        ops = self._watch_ops.get((round_no, attempt))
        if ops is None:
            ops = self._watch_ops[(round_no, attempt)] = membership.watch_ops(
                self.keys, round_no, attempt
            )
        return ops

    def _after_watch(
        self,
        node: SimNode,
        world: RoundResult,
        replies: tuple[Reply, ...],
        successor: str | None,
        attempt: int,
    ) -> None:
        seen = _read_watch(replies[:4])
        if self._act_on(node, world, seen, attempt) or successor is None:
            return
        beat = replies[4]
        counter = decode_counter(beat if isinstance(beat, bytes) else None)
        node.ring = node.ring.observe(successor, counter, self.now)
        if node.ring.is_dead(successor, self.now, self.config.heartbeat_timeout):
            self._peer_found_dead(node, world, successor)

    def _look_held(self, node: SimNode, world: RoundResult) -> None:
        # The held wait's answer is the look: the keys as they are now, one latency after the
        # write that fired it (the real member looks then; its look is not counted again).
        attempt = node.attempt
        # Members waking together read the same keys at the same instant: read them once
        # (again after any batch applied meanwhile).
        key = (world.round_no, attempt, self.sim_store.ops)
        seen = self._held_looks.get(key)
        if seen is None:
            data = self.store
            batch = self._watch_batch(world.round_no, attempt)
            seen = _read_watch(tuple(data.get(op.key) for op in batch))
            self._held_looks = {key: seen}
        self._act_on(node, world, seen, attempt)

    def _act_on(
        self, node: SimNode, world: RoundResult, seen: membership.RoundWatch, attempt: int
    ) -> bool:
        """A look at the round's watch keys (taken while the node ran ``attempt``), decided by
        the node's membership machine and agent; False when it was no news (the ring check is
        next)."""
        if node.paused:  # a stopped process acts on nothing; it looks again when it resumes
            return True
        return self._look_found(node, world, seen, attempt)

    def _cut_off(self, nodes: list[SimNode]) -> None:
        for node in nodes:
            if node.status is Status.JOINING and node.wait is not None:
                self._connection_lost(node)
            self._arm_fence(node)
