"""How often a driver reads what the agent waits on, by phase: computed here from the config.

A driver steps the node on what its pumps put in its inbox (worker exits, a round watcher's
wake-up, a join's end) and, between them, on its own periodic reads: while the workers run,
the hang watch and the keep-alive every ``monitor_interval``, and a look at the rendezvous;
while a failure is held, a look (it times the ring successor, whose loss the hold waits for);
at the exit barrier, the barrier's counter with a look; fenced, a look and the keep-alive.
These periods are the agent's decisions as much as its rows are, so they are made here:

* a read is due every ``monitor_interval`` while running or fenced, at most every
  :data:`HOLD_LOOK_EVERY` while holding and every :data:`BARRIER_READ_EVERY` at the exit
  barrier (a peer's loss, or the last arrival, is then what ends the phase);
* a look at the rendezvous while running is due every ``max(monitor_interval,``
  :data:`LOOK_EVERY` ``)``; with a round watcher that wakes the driver on any change, only to
  time the ring successor's heartbeat (``liveness.look_period`` of the heartbeat interval).

Pure: the driver holds the deadlines on its own clock.
"""

from __future__ import annotations

from attrs import field, frozen, validators

from tpelastic.core.agent.states import AgentPhase
from tpelastic.core.rendezvous.liveness import LOOK_EVERY_MAX, look_period
from tpelastic.core.values import Duration, _positive, value_eq, value_hash, value_repr

# A look costs a few store reads; worker exits need no look (their pump wakes the driver).
LOOK_EVERY = 0.25
# While a failure is held, a look this often at least (it times the ring successor).
HOLD_LOOK_EVERY = 0.25
# At the exit barrier, its counter (and a look) this often at least.
BARRIER_READ_EVERY = 0.05


@frozen(kw_only=True)
class ReadConfig:
    """What the read periods follow: the agent's monitor interval and the rendezvous's
    heartbeat interval (None: it keeps no heartbeat)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    monitor_interval: Duration = field(validator=_positive)
    heartbeat_interval: Duration | None = field(
        default=None, validator=validators.optional(_positive)
    )
    # While a watcher runs, a look this often instead (tests show the watcher alone delivers).
    look_fallback: Duration | None = field(default=None, validator=validators.optional(_positive))


def read_period(phase: AgentPhase, config: ReadConfig) -> Duration | None:
    """How long after one periodic read in ``phase`` the next is due; None: the phase has no
    periodic reads (its observations are the outcomes of the effect carried out last)."""
    monitor = config.monitor_interval
    if phase is AgentPhase.RUNNING or phase is AgentPhase.FENCED:
        return monitor
    if phase is AgentPhase.HOLDING:
        return min(monitor, HOLD_LOOK_EVERY)
    if phase is AgentPhase.EXIT_BARRIER:
        return min(monitor, BARRIER_READ_EVERY)
    return None


def running_look_period(config: ReadConfig, *, watching: bool) -> Duration:
    """How long after one look at the rendezvous, while the workers run, the next is due.
    ``watching``: a round watcher wakes the driver on every change, so the look only times
    the ring successor's heartbeat."""
    if not watching:
        return max(config.monitor_interval, LOOK_EVERY)
    if config.look_fallback is not None:
        return config.look_fallback
    interval = config.heartbeat_interval
    return look_period(interval) if interval else LOOK_EVERY_MAX


__all__ = [
    "BARRIER_READ_EVERY",
    "HOLD_LOOK_EVERY",
    "LOOK_EVERY",
    "ReadConfig",
    "read_period",
    "running_look_period",
]
