"""RendezvousSettings: the configuration shared by the rendezvous state machine, for one run.

The machine itself (:mod:`tpelastic.core.rendezvous`) takes a
:class:`~tpelastic.core.rendezvous.config.RendezvousConfig`; the settings add the run id and are
built from :class:`RendezvousParameters` with torchrun's key names and units.
"""

from __future__ import annotations

from attrs import field, frozen

from tpelastic.adapters.rendezvous.parameters import RendezvousParameters
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.values import value_eq, value_hash, value_repr


def _run_id(_instance: object, _attribute: object, value: str) -> None:
    if not isinstance(value, str) or not value or "/" in value:
        raise ValueError(f"run_id must be a non-empty string without '/', got {value!r}")


@frozen(kw_only=True)
class RendezvousSettings:
    """The run id plus the machine's bounds and timeouts (all in seconds).

    Attributes:
        run_id: the job's id; every key of the run lives under ``tpelastic/v1/<run_id>/``.
        config: node bounds and timeouts, as the pure core reads them.
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    run_id: str = field(validator=_run_id)
    config: RendezvousConfig

    @property
    def min_nodes(self) -> int:
        return self.config.min_nodes

    @property
    def max_nodes(self) -> int:
        return self.config.max_nodes

    @property
    def keep_alive_interval(self) -> float:
        return self.config.heartbeat_interval

    @property
    def keep_alive_expiry(self) -> float:
        return self.config.heartbeat_timeout

    @classmethod
    def from_parameters(cls, params: RendezvousParameters) -> RendezvousSettings:
        """Map ``params`` onto the machine's config.

        ``join_timeout`` and ``last_call_timeout`` carry over; the heartbeat interval is
        ``keep_alive_interval`` (alias ``heartbeat``) and a node is dead to an observer after
        ``keep_alive_interval * keep_alive_max_attempt`` without a new heartbeat.

        Raises:
            ValueError: ``keep_alive_max_attempt`` is 1 (the expiry must exceed one interval, or
                every node would look dead between two of its own heartbeats), or a bad run id.
        """
        timeout = params.timeout
        if timeout.keep_alive_max_attempt < 2:
            raise ValueError(
                "rendezvous config keep_alive_max_attempt must be >= 2 for the dynamic "
                f"backend, got {timeout.keep_alive_max_attempt}"
            )
        config = RendezvousConfig(
            min_nodes=params.min_nodes,
            max_nodes=params.max_nodes,
            join_timeout=timeout.join.total_seconds(),
            last_call_timeout=timeout.last_call.total_seconds(),
            heartbeat_interval=timeout.heartbeat.total_seconds(),
            heartbeat_timeout=timeout.keep_alive_expiry.total_seconds(),
        )
        return cls(run_id=params.run_id, config=config)


__all__ = ["RendezvousSettings"]
