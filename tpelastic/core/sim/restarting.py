"""Restarting a round's workers in place, in the simulator (attempts within a round), and the
members' held waits on the keys that end their world.

A training node whose workers fail, with ``restart_in_place`` on and budget left, does not
re-join: its agent opens the next attempt of its round
(:func:`tpelastic.core.rendezvous.attempts.open_attempt_ops`, one set-if-absent through the
simulated store, with latency) and, once the store answered, restarts its own workers as that
attempt (the real agent opens the attempt, then starts its workers). When the store cannot be
reached the node's handler retries the open (:mod:`tpelastic.core.sim.agents`).

Every member learns of the attempt as the real agent does: its round watcher holds a wait on the
watch keys, so a member wakes one latency after the key is set (and its periodic look at the
next round reads the same key, should the held wait have missed it). A member that
learns of attempt ``n`` restarts as ``n`` and holds a wait on ``n + 1``. The job-wide restart
count of attempt ``n`` is the round's count plus ``n``; a member's next join reports the highest
attempt it reached, and the next round's closer carries it (R16).

Whether a failure restarts in place, re-joins or ends the job is the node's agent's decision
(:mod:`tpelastic.core.sim.agents`); this module carries out the restart it asks for. Membership
changes (crash, leave, late join, partition, heartbeat loss) re-form rounds as before.

Checks (kept in ``overlaps`` like two rounds training side by side; specs/rendezvous_join.md,
R17): a node's attempts of one round only move forward, and a node runs only attempts the store
holds. Members of one round run different attempts only between an
attempt's opening and their learning of it (different attempts never form one world: each has
its own namespace).

The round watcher's wait covers the other watch keys too (``membership.watch_ops``): the close,
the next round's ``opened`` and its arrivals. A member holds it from the moment it trains in a
round until its world ends; a write to one of them makes the member look at once (one latency
after the write, not at its next periodic look) and act as its look would: stop, rejoin, or open
the next round for the nodes that wait. The arrivals key is not held again once it fired (the
real member leaves it out once a look saw it present), so an arrival at a full world wakes the
members once.

Waking the members of a 10,000-node round is one queue action per distinct latency (the held
waits of a key come back from the store as one list, kept in the order they were placed), not a
heap push per member; the run stays deterministic.
"""

from __future__ import annotations

from collections.abc import Callable

from attrs import define, field

from tpelastic.core.rendezvous import attempts
from tpelastic.core.rendezvous.records import RoundResult
from tpelastic.core.sim.joining import JoinDriver
from tpelastic.core.sim.nodes import SimNode, Status

# A node that is a member of its world: training, or holding a failure with its workers stopped.
MEMBER = (Status.TRAINING, Status.HOLDING)

# A held wait: the member, the world it trains in, and the attempt whose opening it waits for.
Held = tuple[SimNode, RoundResult, int]


@define
class RestartDriver(JoinDriver):
    """The join driver plus restarts in place. See the module docstring.

    Attributes:
        restart_in_place: a worker failure opens the next attempt of the round (True) or
            re-forms the round as a full re-rendezvous (False).
        attempt_times: (round, attempt) -> [instant of the failure that opened it, last instant
            a member restarted as it, how many member restarts]; attempt 0 is not listed (that
            is ``round_times``).
        restarts: member restarts in place, all attempts together.

    With ``detail`` off no ``node.restarted`` record is kept (10,000 per failure at scale):
    ``attempt_times`` and ``restarts`` still count them.
    """

    restart_in_place: bool = True
    attempt_times: dict[tuple[int, int], list[float]] = field(factory=dict)
    restarts: int = 0
    # round -> the keys its members hold waits on, released once a later round trains.
    _held_keys: dict[int, set[str]] = field(factory=dict, alias="_held_keys")
    # The world-ending keys (closed, a next round's opened and arrivals) held waits were placed
    # on: a write to one makes its members look, not restart.
    _look_keys: set[str] = field(factory=set, alias="_look_keys")

    # --- restarting as an attempt -------------------------------------------------------------

    def _restart(self, node: SimNode, world: RoundResult, attempt: int) -> None:
        """The node's workers stop and start again as ``attempt`` of its round."""
        self._restart_all([(node, world)], world.round_no, node.attempt, attempt)

    def _restart_all(
        self,
        members: list[tuple[SimNode, RoundResult]],
        round_no: int,
        before: int,
        attempt: int,
    ) -> None:
        """``members``, all running attempt ``before`` of round ``round_no``, restart their
        workers as ``attempt``. Done for a whole batch at once: a wake-up of 10,000 members
        updates the counts once and places their next held waits as one list."""
        if not members:
            return
        if attempt <= before:
            self.overlaps += [
                f"{self.now:.2f}: {node.name} went from attempt {before} to {attempt} of round "
                f"{round_no}"
                for node, _world in members
            ]
        elif self.keys.attempt(round_no, attempt) not in self.store:
            self.overlaps += [
                f"{self.now:.2f}: {node.name} runs attempt {attempt} of round {round_no}, "
                "never opened"
                for node, _world in members
            ]
        count = len(members)
        self._count_run(round_no, before, -count)
        self._count_run(round_no, attempt, count)
        for node, _world in members:
            node.attempt = attempt
        self.restarts += count
        times = self.attempt_times.get((round_no, attempt))
        if times is None:
            self.attempt_times[(round_no, attempt)] = [self.now, self.now, float(count)]
        else:
            times[1], times[2] = self.now, times[2] + count
        if self.detail:
            for node, world in members:
                self._note_restart(node, world, attempt)
        self._account_health()
        self._hold_all(members, round_no, attempt)

    def _note_restart(self, node: SimNode, world: RoundResult, attempt: int) -> None:
        self._note(
            node,
            "node.restarted",
            f"{node.name} restarts its workers as attempt {attempt} of round {world.round_no}",
            round=world.round_no,
            attempt=attempt,
            restart_count=attempts.attempt_restart_count(world, attempt),
        )

    # --- learning of an attempt ----------------------------------------------------------------

    def _started_training(self, node: SimNode) -> None:
        world = node.world
        assert world is not None
        if world.round_no not in self._held_keys:
            # A new round trains: nobody trains in an earlier one any more (one world at a
            # time), so their held waits are over (on the job-wide closed key: theirs only).
            done = [r for r in self._held_keys if r < world.round_no]
            for r in done:
                self.sim_store.release(sorted(self._held_keys.pop(r)))
            if done:
                current = world.round_no
                self.sim_store.prune(self.keys.closed(), lambda e: e[1].round_no >= current)  # type: ignore[index]
            self._held_keys[world.round_no] = set()
        self._hold_look([(node, world)], world.round_no)
        if self.restart_in_place:
            self._hold_all([(node, world)], world.round_no, node.attempt)

    def _hold_look(self, members: list[tuple[SimNode, RoundResult]], round_no: int) -> None:
        """Each member holds a wait on the keys that end its world, as the real round watcher
        does (``membership.watch_ops`` less the attempt key, held by :meth:`_hold_all`): the
        rendezvous closed, the next round opened, a node arrived at it. A write to any of them
        makes the member look at once (:meth:`_look_held`), one latency after the write.

        It stays placed across the round's in-place attempts (the same keys); the arrivals key
        is not placed again once it fired (the real member leaves it out once a look saw it)."""
        nxt = round_no + 1
        entries: list[Held] = [(node, world, 0) for node, world in members]
        # One wait request per member (counted with the attempt key when that is held too).
        requests = 0 if self.restart_in_place else len(entries)
        held = self._held_keys.setdefault(round_no, set())
        for key in (self.keys.closed(), self.keys.opened(nxt), self.keys.arrivals(nxt)):
            self._look_keys.add(key)
            if key != self.keys.closed():
                held.add(key)
            if not self.sim_store.hold(key, entries, requests):
                self._wake_held(entries, look=True)  # written already: look after one latency
            requests = 0

    def _hold_all(
        self, members: list[tuple[SimNode, RoundResult]], round_no: int, attempt: int
    ) -> None:
        """Each member, running ``attempt``, holds a wait on the round's next attempt, as the
        real round watcher does."""
        key = attempts.next_attempt_key(self.keys, round_no, attempt)
        self._held_keys.setdefault(round_no, set()).add(key)
        entries: list[Held] = [(node, world, attempt + 1) for node, world in members]
        if not self.sim_store.hold(key, entries):
            # Opened already (they learned of an earlier attempt late): wake after one latency.
            self._wake_held(entries)

    def _fire_held(self) -> None:
        fired, self.sim_store.fired = self.sim_store.fired, []
        for key, held in fired:
            self._wake_held(held, look=key in self._look_keys)  # type: ignore[arg-type]

    def _wake_held(self, held: list[Held], look: bool = False) -> None:
        """Wake the held waits on a key just written: one action per distinct latency, each
        taking its members in the order they started waiting. ``look``: a key that ends the
        world (the members look), not an attempt (they restart)."""
        if not any(entry[0].extra_latency for entry in held):
            self.queue.schedule(self.now + self.latency, self._learner(held, look))
            return
        by_latency: dict[float, list[Held]] = {}
        for entry in held:
            by_latency.setdefault(self._latency(entry[0]), []).append(entry)
        for delay, entries in by_latency.items():
            self.queue.schedule(self.now + delay, self._learner(entries, look))

    def _learner(self, entries: list[Held], look: bool) -> Callable[[], None]:
        def learn() -> None:
            if look:
                self._learn_look(entries)
            else:
                self._learn(entries)

        return learn

    def _learn_look(self, entries: list[Held]) -> None:
        """Members whose held wait on a world-ending key fired look at once (in placement
        order); a stale wait (the member moved on) or one that cannot reach the store now is
        dropped, and the member's periodic look finds the key later."""
        store_up = self.store_up
        for node, world, _ in entries:
            # A member whose wait fired on two keys (opened, then arrivals) and that rejoined
            # on the first is no longer in ``world``: the second is stale.
            if (
                node.world is world
                and node.status in MEMBER
                and not node.retry_pending
                and node.beating
                and store_up
                and not node.partitioned
            ):
                self._look_held(node, world)

    def _look_held(self, node: SimNode, world: RoundResult) -> None:
        """A held wait on a world-ending key fired: the member looks (the cluster acts)."""

    def _learn(self, entries: list[Held]) -> None:
        """Members whose held wait fired learn that the attempt opened and restart as it.

        ``entries`` all wait on one key: the same attempt of the same round."""
        # A wait of a node that moved on (re-joined, crashed, restarted already) is stale; one
        # that cannot reach the store now fails, and its periodic look finds the key later.
        training, store_up = Status.TRAINING, self.store_up
        ready = [
            (node, world)
            for node, world, attempt in entries
            if node.world is world
            and node.attempt == attempt - 1
            and node.status is training
            and node.beating
            and store_up
            and not node.partitioned
        ]
        if ready:
            self._learned_attempt(ready, entries[0][2])

    def _learned_attempt(self, members: list[tuple[SimNode, RoundResult]], attempt: int) -> None:
        """``members``, running the attempt before ``attempt``, learned that it opened."""
        self._restart_all(members, members[0][1].round_no, attempt - 1, attempt)
