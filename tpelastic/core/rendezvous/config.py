"""Settings of the rendezvous machine: node bounds and timeouts, all in seconds."""

from __future__ import annotations

from attrs import field, frozen

from tpelastic.core.values import Duration, _positive, value_eq, value_hash, value_repr


def _at_least_one(_instance: object, attribute: object, value: int) -> None:
    if value < 1:
        raise ValueError(f"{getattr(attribute, 'name', 'value')} must be >= 1, got {value}")


@frozen(kw_only=True)
class RendezvousConfig:
    """Bounds and timeouts shared by every node of a run.

    Attributes:
        min_nodes: a round completes with at least this many nodes.
        max_nodes: and at most this many; later arrivals wait for the next round.
        join_timeout: how long a join may take in all before it fails.
        last_call_timeout: once ``min_nodes`` arrived, how long the round stays open for more.
        heartbeat_interval: how often a node's keep-alive bumps its heartbeat counter.
        heartbeat_timeout: a node whose counter has not moved this long is dead to an observer.
        takeover_after: a node waiting this long for the closer's result starts closing itself.
        leased_liveness: the store ties each node's heartbeat key to a lease that expires
            ``heartbeat_timeout`` after its last renewal (etcd), so an absent key means the node
            is dead, at once, for every observer; otherwise (TCP, file stores) observers time a
            heartbeat counter on their own clocks. The adapter sets it from what the store can do.
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    min_nodes: int = field(validator=_at_least_one)
    max_nodes: int = field(validator=_at_least_one)
    join_timeout: Duration = field(default=600.0, validator=_positive)
    last_call_timeout: Duration = field(default=30.0, validator=_positive)
    heartbeat_interval: Duration = field(default=5.0, validator=_positive)
    heartbeat_timeout: Duration = field(default=15.0, validator=_positive)
    takeover_after: Duration = field(default=0.0)
    leased_liveness: bool = field(default=False, converter=bool)

    def __attrs_post_init__(self) -> None:
        if self.max_nodes < self.min_nodes:
            raise ValueError(
                f"max_nodes ({self.max_nodes}) must be >= min_nodes ({self.min_nodes})"
            )
        if self.heartbeat_timeout <= self.heartbeat_interval:
            raise ValueError(
                f"heartbeat_timeout ({self.heartbeat_timeout}) must exceed heartbeat_interval "
                f"({self.heartbeat_interval})"
            )

    @property
    def takeover_delay(self) -> Duration:
        """How long a follower waits for the closer before it closes the round itself."""
        if self.takeover_after > 0:
            return self.takeover_after
        return self.heartbeat_timeout + self.last_call_timeout
