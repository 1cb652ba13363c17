"""What a lost store connection means, and how long it is waited out.

A store client observes how a call failed; this module decides what that means. Two
observations are told apart (see specs/store_outage.md):

* ``gone``: the connection was refused or reset after the client had been connected. Nothing
  listens at the store's address any more: the process that served it has died. When an agent
  hosted the store, the run's state died with it, and by the keep-alive expiry every peer has
  found that node dead as well, so the outage is waited out for ``keep_alive_expiry`` only.
* ``silent``: the call timed out. The server's process is there (the kernel still holds its
  connections) but does not answer: it may be paused. It is waited out for ``read_timeout``.

An outage starts at the first failed call and ends at the first call that succeeds. Every
thread of a process shares one outage (its deadline and its first line). Pure: the caller
passes ``now`` and carries out the verdict (sleep and retry, or raise).
"""

from __future__ import annotations

from typing import Literal

from attrs import field, frozen

from tpelastic.core.values import Duration, Instant, _positive, value_eq, value_hash, value_repr

LossKind = Literal["gone", "silent"]
LOSS_KINDS: tuple[str, ...] = ("gone", "silent")

# Backoff between retries of one caller: doubles from the first to the most, never past the
# outage's deadline.
BACKOFF_FIRST: Duration = 0.05
BACKOFF_MOST: Duration = 1.0

FIX = (
    "run the store apart from the agents (`tpelastic store`, or etcd) so that no agent's "
    "death ends the job: see docs/backends.md"
)


@frozen(kw_only=True)
class OutagePolicy:
    """How long each kind of loss is waited out, in seconds.

    Attributes:
        keep_alive_expiry: a ``gone`` store (the rendezvous' keep_alive_interval x
            keep_alive_max_attempt).
        read_timeout: a ``silent`` store.
        silent_after: a call (not a held wait) with no answer this long starts a ``silent``
            outage at once; the call goes on waiting for its answer until ``read_timeout``.
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    keep_alive_expiry: Duration = field(validator=_positive)
    read_timeout: Duration = field(validator=_positive)
    silent_after: Duration = field(default=1.0, validator=_positive)

    def patience(self, kind: LossKind) -> Duration:
        return self.keep_alive_expiry if kind == "gone" else self.read_timeout


@frozen(kw_only=True)
class Outage:
    """A store outage in progress: since when, of what kind, and until when it is waited out."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    since: Instant
    kind: LossKind
    deadline: Instant


@frozen(kw_only=True)
class Retry:
    """Try the call again after ``delay`` seconds.

    ``announce`` is set on the failure that started the outage: log ``line`` at once.
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    delay: Duration
    announce: bool
    line: str


@frozen(kw_only=True)
class GiveUp:
    """Stop retrying: the call fails with ``reason`` (one line; a ``gone`` store names the fix)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    reason: str


Verdict = Retry | GiveUp


def on_failure(
    outage: Outage | None,
    kind: LossKind,
    now: Instant,
    policy: OutagePolicy,
    *,
    where: str,
    tries: int,
) -> tuple[Outage, Verdict]:
    """A call to the store at ``where`` failed with ``kind`` at ``now``, this caller's ``tries``-th
    failure in a row (1 for its first). Returns the outage and what to do."""
    if kind not in LOSS_KINDS:
        raise ValueError(f"loss kind must be one of {LOSS_KINDS}, got {kind!r}")
    announce = outage is None
    if outage is None:
        outage = Outage(since=now, kind=kind, deadline=now + policy.patience(kind))
    elif kind == "gone" and outage.kind == "silent":
        # A silent server that then refuses has died meanwhile: the shorter patience applies.
        outage = Outage(
            since=outage.since,
            kind="gone",
            deadline=min(outage.deadline, outage.since + policy.patience("gone")),
        )
    left = outage.deadline - now
    if left <= 0:
        return outage, GiveUp(reason=give_up_reason(outage, now, where))
    delay = min(BACKOFF_FIRST * 2 ** max(0, tries - 1), BACKOFF_MOST, left)
    return outage, Retry(delay=delay, announce=announce, line=waiting_line(outage, where))


def on_slow(
    outage: Outage | None, started: Instant, policy: OutagePolicy, *, where: str
) -> tuple[Outage, str | None]:
    """A call started at ``started`` has had no answer for ``policy.silent_after``. Returns the
    outage (started with the call, unless one is in progress) and the line to log at once, or
    None when the outage was announced already."""
    if outage is not None:
        return outage, None
    outage = Outage(since=started, kind="silent", deadline=started + policy.read_timeout)
    bound = f"read_timeout, {policy.read_timeout:g}s"
    return outage, (
        f"{where} has not answered for {policy.silent_after:g}s (its process may be paused): "
        f"waiting for up to {bound}"
    )


def on_success(outage: Outage | None, now: Instant) -> tuple[None, Duration | None]:
    """A call succeeded: the outage (if any) is over. Returns how long it lasted, or None."""
    return None, (None if outage is None else now - outage.since)


def waiting_line(outage: Outage, where: str) -> str:
    """The first line of an outage: what is waited for, and for how long."""
    patience = outage.deadline - outage.since
    if outage.kind == "gone":
        what = "refuses connections (its process may have died)"
        bound = f"the keep-alive expiry, {patience:g}s"
    else:
        what = "does not answer (its process may be paused)"
        bound = f"read_timeout, {patience:g}s"
    return f"{where} {what}: retrying with backoff for up to {bound}"


def give_up_reason(outage: Outage, now: Instant, where: str) -> str:
    """Why the calls fail from now on (one line)."""
    spent = now - outage.since
    if outage.kind == "gone":
        return (
            f"{where} is gone (connections refused for {spent:.1f}s, past the keep-alive "
            "expiry): the process that served it died (an agent that hosts the store takes "
            "the run's state with it); " + FIX
        )
    return (
        f"{where} did not answer for {spent:.1f}s (read_timeout): its process is paused or "
        "overloaded"
    )


__all__ = [
    "BACKOFF_FIRST",
    "BACKOFF_MOST",
    "FIX",
    "LOSS_KINDS",
    "GiveUp",
    "LossKind",
    "Outage",
    "OutagePolicy",
    "Retry",
    "Verdict",
    "give_up_reason",
    "on_failure",
    "on_slow",
    "on_success",
    "waiting_line",
]
