"""The rendezvous error types: why membership could not be formed.

Every blocking rendezvous call raises one of these (never a store library's exception):

=============================  ==============================================================
RendezvousError                base of them all
RendezvousClosedError          the rendezvous is closed; no one may join any more
RendezvousTimeoutError         a phase ran past its time budget
RendezvousJoinTimeoutError     (a RendezvousTimeoutError) the join window elapsed with fewer
                               than min nodes
RendezvousConnectionError      the store could not be reached
RendezvousStateError           the shared state is unreadable (foreign bytes, newer schema)
                               or the store rejected an update
RendezvousGracefulExitError    not a failure: unwinds an agent that leaves on purpose
=============================  ==============================================================
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tpelastic.adapters.stores.errors import StoreCorrupt, StoreUnavailable


class RendezvousError(Exception):
    """Base class of every rendezvous failure."""


class RendezvousClosedError(RendezvousError):
    """The rendezvous has been closed and accepts no more participants."""


class RendezvousTimeoutError(RendezvousError):
    """A rendezvous phase exceeded its time budget."""


class RendezvousJoinTimeoutError(RendezvousTimeoutError):
    """The join window elapsed before min nodes had joined."""


class RendezvousConnectionError(RendezvousError):
    """The rendezvous store could not be reached."""


class RendezvousStateError(RendezvousError):
    """The shared rendezvous state is unreadable or the store rejected an update."""


class RendezvousGracefulExitError(RendezvousError):
    """Raised to unwind an agent that is leaving on purpose (e.g. the last node going)."""


@contextmanager
def store_errors_as_rendezvous_errors(context: str) -> Iterator[None]:
    """Turn store adapter errors raised inside the block into rendezvous errors.

    ``StoreUnavailable`` becomes ``RendezvousConnectionError`` and ``StoreCorrupt`` becomes
    ``RendezvousStateError``; ``context`` (e.g. ``"joining run 'r1'"``) starts the message.
    """
    try:
        yield
    except StoreUnavailable as error:
        raise RendezvousConnectionError(f"{context}: {error}") from error
    except StoreCorrupt as error:
        raise RendezvousStateError(f"{context}: {error}") from error


__all__ = [
    "RendezvousClosedError",
    "RendezvousConnectionError",
    "RendezvousError",
    "RendezvousGracefulExitError",
    "RendezvousJoinTimeoutError",
    "RendezvousStateError",
    "RendezvousTimeoutError",
    "store_errors_as_rendezvous_errors",
]
