"""When a worker counts as stuck: every decision of the hang watch is in this table.

Workers count their steps into a progress file each (``tpelastic.progress.step``); the agent
reads the files and feeds what it read here, with its own monotonic ``now``
(``ProgressRead``). A rank is stuck once its counter has not moved for ``idle_timeout`` seconds,
or for ``first_step_timeout`` before its first step (startup and loading take longer): its
idle time runs from the watch's start or from the read that first saw its counter move. A
fresh file reads 0: that is the worker starting, not a step, so it opens no new window. A rank
whose process has ended is never stuck (the read names the live ranks). Among the stuck ranks
the likely cause comes first: one not waiting in a collective, then the one that entered the
fewest collectives, then the lowest rank; that one is reported (``Stall``), and the driver turns
it into the agent's ``WorkerStuck`` with the culprit it finds.

Without an ``idle_timeout`` (progress is read for the health endpoint only) nobody is stuck.
Each start of workers begins a new watch (``WatchStarted``); its stop ends it.

Pure: the driver reads the files and the clock; this holds the counters and decides.
"""

from __future__ import annotations

import enum

from attrs import evolve, field, frozen, validators

from tpelastic.core.table import Action, Guard, Row, Step, build_table
from tpelastic.core.values import Duration, Instant, _positive, value_eq, value_hash, value_repr

# Starting a worker (imports, process group, data) takes longer than a step; unless told
# otherwise a rank is allowed at least this long for its first step.
FIRST_STEP_DEFAULT = 60.0


class WatchPhase(enum.Enum):
    IDLE = "IDLE"  # no workers are watched
    WATCHING = "WATCHING"


@frozen(kw_only=True)
class ProgressConfig:
    """``idle_timeout``: no new step for that long is stuck (None: never, health only);
    ``first_step_timeout``: the same before a rank's first step."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    idle_timeout: Duration | None = field(default=None, validator=validators.optional(_positive))
    first_step_timeout: Duration | None = field(
        default=None, validator=validators.optional(_positive)
    )


def progress_config(
    stall_timeout: Duration | None, first_step_timeout: Duration | None = None
) -> ProgressConfig:
    """The watch of an agent with ``stall_timeout`` (None: health only): the first step is
    allowed ``first_step_timeout``, by default the stall timeout and at least
    :data:`FIRST_STEP_DEFAULT`."""
    if stall_timeout is None:
        return ProgressConfig()
    first = first_step_timeout or max(stall_timeout, FIRST_STEP_DEFAULT)
    return ProgressConfig(idle_timeout=stall_timeout, first_step_timeout=first)


@frozen(kw_only=True)
class ProgressSample:
    """One read of a worker's progress file.

    Attributes:
        counter: steps so far.
        waiting: inside a wait on other ranks (``waiting()``, or a collective when hooked).
        step_seconds: how long the last step took; None before the second step.
        collectives: how many collectives the worker has entered (0 when not hooked).
        collective: the last collective's name ("" before the first).
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    counter: int
    waiting: bool
    step_seconds: float | None = None
    collectives: int = 0
    collective: str = ""


@frozen(kw_only=True)
class RankProgress:
    """What the watch knows of one rank: its last counter (None: never read) and since when,
    on the observer's clock, it has not moved; its last readable sample."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    rank: int = field(validator=validators.ge(0))
    since: Instant
    counter: int | None = None
    sample: ProgressSample | None = None


@frozen(kw_only=True)
class ProgressState:
    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    phase: WatchPhase = WatchPhase.IDLE
    ranks: tuple[RankProgress, ...] = ()


@frozen(kw_only=True)
class Stall:
    """A rank that has made no progress for ``idle_for`` seconds (the watch's verdict)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    rank: int
    idle_for: float
    counter: int | None  # None: never reported a step
    waiting: bool  # True: blocked in a collective, probably on another rank
    collectives: int = 0  # how many collectives it entered (0 without the collective hook)
    collective: str = ""  # the last one's name

    def describe(self) -> str:
        last = "no step yet" if self.counter is None else f"last step {self.counter}"
        why = ", waiting in a collective" if self.waiting else ""
        return f"rank {self.rank} made no progress for {self.idle_for:.1f} s ({last}{why})"


# -- observations ------------------------------------------------------------------------------


@frozen(kw_only=True)
class WatchStarted:
    """Workers of local ``ranks`` started at ``now`` (the start counts as progress)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    ranks: tuple[int, ...]


@frozen(kw_only=True)
class ProgressRead:
    """What one read of the progress files found: ``(rank, sample)`` for each readable file
    (a missing, empty or torn one is left out), and which ranks' processes still run (None:
    all of them)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    samples: tuple[tuple[int, ProgressSample], ...] = ()
    live: tuple[int, ...] | None = None


@frozen(kw_only=True)
class WatchStopped:
    """The watched workers were stopped."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


WATCH_EVENTS: tuple[type, ...] = (WatchStarted, ProgressRead, WatchStopped)

# -- the arithmetic ----------------------------------------------------------------------------


def observed(ranks: tuple[RankProgress, ...], read: ProgressRead) -> tuple[RankProgress, ...]:
    """``ranks`` after ``read``: a counter that moved restarts its rank's idle time at the
    read's ``now`` (a fresh file's 0 is the worker starting, not a step); a rank the watch
    does not hold is ignored."""
    if not read.samples:
        return ranks
    found = dict(read.samples)
    out: list[RankProgress] = []
    for held in ranks:
        sample = found.get(held.rank)
        if sample is None:
            out.append(held)
            continue
        fresh = held.counter is None and sample.counter == 0
        moved = sample.counter != held.counter and not fresh
        since = read.now if moved else held.since
        out.append(evolve(held, counter=sample.counter, since=since, sample=sample))
    return tuple(out)


def stalls(
    ranks: tuple[RankProgress, ...], now: Instant, config: ProgressConfig
) -> tuple[Stall, ...]:
    """The stuck ranks at ``now``, the likely cause first (not waiting, then the fewest
    collectives entered, then the lowest rank); none without an ``idle_timeout``."""
    idle_limit = config.idle_timeout
    if idle_limit is None:
        return ()
    first_limit = config.first_step_timeout or idle_limit
    found: list[Stall] = []
    for held in ranks:
        idle = now - held.since
        limit = first_limit if held.counter in (None, 0) else idle_limit
        if idle < limit:
            continue
        sample = held.sample
        found.append(
            Stall(
                rank=held.rank,
                idle_for=idle,
                counter=held.counter,
                waiting=sample.waiting if sample is not None else False,
                collectives=sample.collectives if sample is not None else 0,
                collective=sample.collective if sample is not None else "",
            )
        )
    return tuple(sorted(found, key=lambda s: (s.waiting, s.collectives, s.rank)))


def _live_stalls(state: ProgressState, event: ProgressRead, config: ProgressConfig) -> list[Stall]:
    found = stalls(observed(state.ranks, event), event.now, config)
    live = event.live
    return [s for s in found if live is None or s.rank in live]


# -- guards ------------------------------------------------------------------------------------


def live_rank_stuck(state: ProgressState, event: ProgressRead, config: ProgressConfig) -> bool:
    """After this read, has a rank whose process still runs made no progress for its limit?"""
    return bool(_live_stalls(state, event, config))


# -- actions -----------------------------------------------------------------------------------

Out = tuple[ProgressState, tuple[object, ...]]


def start(state: ProgressState, event: WatchStarted, config: ProgressConfig) -> Out:
    ranks = tuple(RankProgress(rank=r, since=event.now) for r in sorted(event.ranks))
    return evolve(state, ranks=ranks), ()


def record(state: ProgressState, event: ProgressRead, config: ProgressConfig) -> Out:
    return evolve(state, ranks=observed(state.ranks, event)), ()


def report_stall(state: ProgressState, event: ProgressRead, config: ProgressConfig) -> Out:
    first = _live_stalls(state, event, config)[0]
    return evolve(state, ranks=observed(state.ranks, event)), (first,)


def stop(state: ProgressState, event: WatchStopped, config: ProgressConfig) -> Out:
    return evolve(state, ranks=()), ()


W, IDLE = WatchPhase.WATCHING, WatchPhase.IDLE
ROWS = (
    *(Row(src=src, on=WatchStarted, dst=W, action="start") for src in (IDLE, W)),
    Row(
        src=W,
        on=ProgressRead,
        dst=W,
        guard="live_rank_stuck",
        action="report_stall",
        note="the likely cause first: not waiting, fewest collectives, lowest rank",
    ),
    Row(src=W, on=ProgressRead, dst=W, action="record", note="nobody stuck yet"),
    Row(src=W, on=WatchStopped, dst=IDLE, action="stop"),
)
GUARDS: dict[str, Guard] = {"live_rank_stuck": live_rank_stuck}
ACTIONS: dict[str, Action] = {
    "start": start,
    "record": record,
    "report_stall": report_stall,
    "stop": stop,
}
TABLE = build_table(
    name="progress_watch",
    phases=WatchPhase,
    initial=IDLE,
    events=WATCH_EVENTS,
    rows=ROWS,
    guards=GUARDS,
    actions=ACTIONS,
    doc=(
        "When a worker counts as stuck. Each start of workers begins a watch; every read of "
        "the progress files (`ProgressRead`, with the ranks whose processes still run) moves "
        "a rank's idle clock when its counter moved (a fresh file's 0 is no step). A live rank "
        "idle for `idle_timeout` (before its first step: `first_step_timeout`, by default at "
        "least 60 s) is stuck, and the likely cause among the stuck is reported as a `Stall`: "
        "not waiting in a collective, then the fewest collectives entered, then the lowest "
        "rank. Without an `idle_timeout` nobody is stuck (health only)."
    ),
)


def step(state: ProgressState, event: object, config: ProgressConfig) -> Step[ProgressState]:
    """Apply one observation to the watch (unknown pairs are rejected cleanly)."""
    return TABLE.step(state, event, config)


__all__ = [
    "FIRST_STEP_DEFAULT",
    "TABLE",
    "WATCH_EVENTS",
    "ProgressConfig",
    "ProgressRead",
    "ProgressSample",
    "ProgressState",
    "RankProgress",
    "Stall",
    "WatchPhase",
    "WatchStarted",
    "WatchStopped",
    "observed",
    "progress_config",
    "stalls",
    "step",
]
