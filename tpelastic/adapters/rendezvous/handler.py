"""RendezvousHandler: the interface every rendezvous backend implements."""

from __future__ import annotations

from abc import ABC, abstractmethod

from tpelastic.adapters.rendezvous.info import RendezvousInfo


class RendezvousHandler(ABC):
    """Algorithmic interface of one rendezvous backend, as an agent drives it.

    Implementations raise only ``RendezvousError`` subclasses from their blocking calls, and
    bound every one of them with a timeout.
    """

    @abstractmethod
    def get_backend(self) -> str:
        """The backend's name, e.g. ``static`` or ``tcp``."""

    @abstractmethod
    def get_run_id(self) -> str:
        """The run identifier this rendezvous serves."""

    @abstractmethod
    def is_closed(self) -> bool:
        """Whether the rendezvous has been closed (no more rounds).

        Raises:
            RendezvousConnectionError: the store could not be reached.
        """

    @abstractmethod
    def set_closed(self) -> None:
        """Close the rendezvous: later joiners get ``RendezvousClosedError``.

        Raises:
            RendezvousConnectionError: the store could not be reached.
        """

    @abstractmethod
    def next_rendezvous(self) -> RendezvousInfo:
        """Join (or re-join) the rendezvous and block until the round completes.

        Raises:
            RendezvousClosedError: the rendezvous is closed.
            RendezvousTimeoutError: the round did not complete in time
                (``RendezvousJoinTimeoutError`` when fewer than min nodes came).
            RendezvousConnectionError: the store could not be reached.
            RendezvousStateError: the shared state is unreadable.
        """

    @abstractmethod
    def num_nodes_waiting(self) -> int:
        """How many nodes wait for the next round (a pending scale-up); 0 if none."""

    @abstractmethod
    def shutdown(self) -> bool:
        """Release this handler's resources (leave the round, stop keep-alives).

        Returns True when the handler shut down cleanly. Never raises for an unreachable store.
        """

    def pre_shutdown(self) -> None:  # noqa: B027 - optional hook, a no-op unless overridden
        """Optional hook an agent calls before ``shutdown`` during its teardown."""

    @property
    def use_agent_store(self) -> bool:
        """Whether workers may reuse the agent's store as their bootstrap store."""
        return False


__all__ = ["RendezvousHandler"]
