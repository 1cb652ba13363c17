"""Errors raised by store adapters, whatever the backing store is.

They split as in the rest of tpelastic: neither is the caller's fault. ``StoreUnavailable`` means
the store could not be talked to; ``StoreCorrupt`` means it answered with bytes that are not ours.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base of the store adapters' errors."""


class StoreUnavailable(StoreError):
    """The store could not be reached: connection refused or lost, or no answer in time.

    Raised by every :class:`~tpelastic.adapters.ports.KeyValueStore` call instead of hanging, and
    by every call made after ``close``.

    Attributes:
        loss: how the connection was lost, where the adapter could tell: ``"gone"`` (refused or
            reset after it had been connected: nothing serves the address any more) or
            ``"silent"`` (no answer in time: the server is there but does not answer). None
            otherwise (never connected, closed by us, a reply we could not read).
        waited_out: the adapter already waited the loss out as long as its outage policy
            allows (specs/store_outage.md): a caller retrying on its own would only delay
            the failure. Always for a call after ``close``: nothing will answer it.
    """

    def __init__(self, message: str, *, loss: str | None = None, waited_out: bool = False) -> None:
        super().__init__(message)
        self.loss = loss
        self.waited_out = waited_out


class StoreCorrupt(StoreError):
    """A key holds bytes that are not in the format we expect (foreign or garbled data).

    Raised by codecs that decode values read from a store; the message names the key and what
    was wrong, never the raw bytes in full.
    """

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"store key {key!r} holds data we cannot read: {problem}")
        self.key = key
        self.problem = problem


__all__ = ["StoreCorrupt", "StoreError", "StoreUnavailable"]
