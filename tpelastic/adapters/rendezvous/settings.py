"""RendezvousSettings: the configuration shared by the rendezvous state machine, for one run.

The machine itself (:mod:`tpelastic.core.rendezvous`) takes a
:class:`~tpelastic.core.rendezvous.config.RendezvousConfig`; the settings hold torch's fields
(run id, node bounds, ``RendezvousTimeout``, keep-alive interval and attempts) and that config,
made from them or from :class:`RendezvousParameters` with torchrun's key names and units.
"""

from __future__ import annotations

from datetime import timedelta

from attrs import field, frozen

from tpelastic.adapters.rendezvous.parameters import RendezvousParameters, RendezvousTimeout
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.values import value_eq, value_hash, value_repr


def _run_id(_instance: object, _attribute: object, value: str) -> None:
    if not isinstance(value, str) or not value or "/" in value:
        raise ValueError(f"run_id must be a non-empty string without '/', got {value!r}")


def _interval(value: timedelta | float) -> timedelta:
    return value if isinstance(value, timedelta) else timedelta(seconds=float(value))


@frozen
class RendezvousSettings:
    """The settings of one run's rendezvous (torch's fields, in torch's order).

    Attributes:
        run_id: the job's id; every key of the run lives under ``tpelastic/v1/<run_id>/``.
        min_nodes, max_nodes: the node bounds of a round.
        timeout: the join, last-call, close and heartbeat budgets.
        keep_alive_interval: the time between a node's heartbeats (a number is seconds).
        keep_alive_max_attempt: heartbeats a node may miss before it is dead to an observer.
        config: (ours, keyword-only) the pure core's machine config; by default made from the
            fields above, and given by :meth:`from_config` when the handler sets more of it
            (takeover, leased liveness).

    Raises:
        ValueError: a bad run id, bounds or a ``keep_alive_max_attempt`` below 2 (the expiry
            must exceed one interval, or every node would look dead between two heartbeats).
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    run_id: str = field(validator=_run_id)
    min_nodes: int
    max_nodes: int
    timeout: RendezvousTimeout
    keep_alive_interval: timedelta = field(converter=_interval)
    keep_alive_max_attempt: int
    config: RendezvousConfig = field(kw_only=True, default=None)

    def __attrs_post_init__(self) -> None:
        if self.config is not None:
            return
        if isinstance(self.keep_alive_max_attempt, bool) or self.keep_alive_max_attempt < 2:
            raise ValueError(
                "rendezvous config keep_alive_max_attempt must be >= 2 for the dynamic "
                f"backend, got {self.keep_alive_max_attempt}"
            )
        interval = self.keep_alive_interval.total_seconds()
        config = RendezvousConfig(
            min_nodes=self.min_nodes,
            max_nodes=self.max_nodes,
            join_timeout=self.timeout.join.total_seconds(),
            last_call_timeout=self.timeout.last_call.total_seconds(),
            heartbeat_interval=interval,
            heartbeat_timeout=interval * self.keep_alive_max_attempt,
        )
        object.__setattr__(self, "config", config)  # frozen: set once, here

    @property
    def keep_alive_expiry(self) -> float:
        """Seconds without a heartbeat after which a node is dead to an observer."""
        return self.config.heartbeat_timeout

    @classmethod
    def from_config(cls, run_id: str, config: RendezvousConfig) -> RendezvousSettings:
        """The settings of ``run_id`` for the core's ``config`` (kept as given)."""
        interval = config.heartbeat_interval
        attempts = max(2, round(config.heartbeat_timeout / interval))
        timeout = RendezvousTimeout(
            join=config.join_timeout,
            last_call=config.last_call_timeout,
            heartbeat=interval,
            keep_alive_max_attempt=attempts,
        )
        return cls(
            run_id, config.min_nodes, config.max_nodes, timeout, interval, attempts, config=config
        )

    @classmethod
    def from_parameters(cls, params: RendezvousParameters) -> RendezvousSettings:
        """Map ``params`` onto the settings: ``join_timeout`` and ``last_call_timeout`` carry
        over; the heartbeat interval is ``keep_alive_interval`` (alias ``heartbeat``) and a node
        is dead to an observer after ``keep_alive_interval * keep_alive_max_attempt``.

        Raises:
            ValueError: ``keep_alive_max_attempt`` below 2, or a bad run id.
        """
        timeout = params.timeout
        return cls(
            params.run_id,
            params.min_nodes,
            params.max_nodes,
            timeout,
            timeout.heartbeat,
            timeout.keep_alive_max_attempt,
        )


__all__ = ["RendezvousSettings"]
