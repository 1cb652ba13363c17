"""Is a node alive? Judged by one observer, on the observer's own monotonic clock.

Each node increments a heartbeat counter in the store. An observer remembers, per node, the last
counter value it saw and *its own* time when that value first appeared. A node is dead to this
observer when its counter has not moved for ``timeout`` seconds of the observer's clock. No
wall-clock time is ever shared, so clock skew between hosts cannot decide who is alive.

With a store that has leases (``RendezvousConfig.leased_liveness``), a node's heartbeat key lives
only as long as the node renews its lease, so nobody times anything: the key is absent exactly
when the node is dead (:func:`judge`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from attrs import evolve, field, frozen

from tpelastic.core.rendezvous.records import decode_counter
from tpelastic.core.values import Duration, Instant, value_eq, value_hash, value_repr

# A member looks at its round (and times its ring successor) at least this often (seconds).
LOOK_EVERY_MAX = 0.25
# Added to the peer-loss window: scheduling delay on a loaded machine (seconds).
PEER_LOSS_MARGIN = 0.5


def look_period(heartbeat_interval: Duration) -> Duration:
    """How often a member looks while its workers run: every heartbeat interval, at most
    every :data:`LOOK_EVERY_MAX`, so a crash is reported within the heartbeat timeout plus
    at most that much."""
    return min(LOOK_EVERY_MAX, heartbeat_interval)


def peer_loss_window(heartbeat_timeout: Duration, heartbeat_interval: Duration) -> Duration:
    """How long after a worker failure a peer's loss still counts as its cause: the latest a
    ring predecessor reports a peer that died at the failure (its last beat may be an interval
    before, and it is looked at within an interval) plus :data:`PEER_LOSS_MARGIN`."""
    return heartbeat_timeout + 2 * heartbeat_interval + PEER_LOSS_MARGIN


@frozen(kw_only=True)
class Sighting:
    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    counter: int
    since: Instant


@frozen(kw_only=True)
class LivenessTracker:
    """Per-node last counter value and the observer's instant when it first saw that value."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    seen: Mapping[str, Sighting] = field(factory=dict)

    def observe(self, node: str, counter: int, now: Instant) -> LivenessTracker:
        """Record a counter read at ``now``. The first sighting starts the node's clock."""
        old = self.seen.get(node)
        if old is not None and old.counter == counter:
            return self
        return evolve(self, seen={**self.seen, node: Sighting(counter=counter, since=now)})

    def observe_many(self, counters: Iterable[tuple[str, int]], now: Instant) -> LivenessTracker:
        """Record many counter reads taken at ``now``, as ``observe`` one after another would.

        One copy of the map for the whole batch (``observe`` copies it per node, which made a
        closer's look at N members cost O(N^2)); the tracker itself when nothing moved.
        """
        seen: dict[str, Sighting] | None = None
        for node, counter in counters:
            old = (seen if seen is not None else self.seen).get(node)
            if old is not None and old.counter == counter:
                continue
            if seen is None:
                seen = dict(self.seen)
            seen[node] = Sighting(counter=counter, since=now)
        return self if seen is None else evolve(self, seen=seen)

    def is_dead(self, node: str, now: Instant, timeout: Duration) -> bool:
        """True when the node's counter has not moved for ``timeout`` on this observer's clock."""
        sighting = self.seen.get(node)
        return sighting is not None and now - sighting.since >= timeout

    def dead(self, nodes: Iterable[str], now: Instant, timeout: Duration) -> frozenset[str]:
        return frozenset(n for n in nodes if self.is_dead(n, now, timeout))

    def next_expiry(self, nodes: Iterable[str], timeout: Duration) -> Instant | None:
        """The earliest instant at which one of ``nodes`` could be declared dead."""
        times = [self.seen[n].since + timeout for n in nodes if n in self.seen]
        return min(times) if times else None


def judge(
    tracker: LivenessTracker,
    node: str,
    beat: bytes | None,
    now: Instant,
    timeout: Duration,
    leased: bool,
) -> tuple[LivenessTracker, bool]:
    """One reading of ``node``'s heartbeat key: the updated tracker, and whether it is dead.

    Leased: dead exactly when the key is absent (its lease expired or was revoked). Counted: the
    counter is observed and the node is dead once it has not moved for ``timeout``.

    Raises:
        StateCorrupt: a counted heartbeat key holds something that is not a counter.
    """
    tracker, dead = judge_many(tracker, ((node, beat),), now, timeout, leased)
    return tracker, bool(dead)


def judge_many(
    tracker: LivenessTracker,
    beats: Sequence[tuple[str, bytes | None]],
    now: Instant,
    timeout: Duration,
    leased: bool,
) -> tuple[LivenessTracker, frozenset[str]]:
    """:func:`judge` for many nodes read at the same ``now``: the updated tracker, and which of
    them are dead. Costs O(len(beats) + nodes tracked), not their product.

    Raises:
        StateCorrupt: a counted heartbeat key holds something that is not a counter (nothing
            is recorded then).
    """
    if leased:
        return tracker, frozenset(node for node, beat in beats if beat is None)
    tracker = tracker.observe_many(((node, decode_counter(beat)) for node, beat in beats), now)
    return tracker, tracker.dead((node for node, _ in beats), now, timeout)
