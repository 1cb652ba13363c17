"""What a member of a completed round does through the dynamic handler, besides joining: look
at what ends its world (:meth:`~MemberActions.watch`), block until that may have changed
(:meth:`~MemberActions.wait_for_change`), open the next round, and restart the round in place
(:meth:`~MemberActions.open_attempt`, :meth:`~MemberActions.follow_attempt`,
:meth:`~MemberActions.attempt_info`).

A mixin of :class:`~tpelastic.adapters.rendezvous.dynamic.DynamicRendezvousHandler`, split from it
so that each module has one job: ``dynamic`` joins, leaves, closes and keeps the heartbeat; this
one holds the member's view of the round while its workers run. It uses the handler's state,
declared below for the type checker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from attrs import evolve

from tpelastic.adapters.rendezvous.driver import execute_ops, run_member
from tpelastic.core.rendezvous import attempts, member, membership
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.membership import RoundWatch
from tpelastic.core.rendezvous.ops import JoinSucceeded
from tpelastic.core.rendezvous.records import RoundResult

if TYPE_CHECKING:
    from tpelastic.adapters.ports import KeyValueStore
    from tpelastic.adapters.rendezvous.dynamic import DynamicRendezvousInfo
    from tpelastic.adapters.rendezvous.settings import RendezvousSettings

log = logging.getLogger("tpelastic.adapters.rendezvous.dynamic")


class MemberActions:
    """The member's side of :class:`DynamicRendezvousHandler` (see the module docstring)."""

    if TYPE_CHECKING:
        settings: RendezvousSettings
        node_id: str
        _keys: RunKeys
        _store: KeyValueStore
        _clock: Callable[[], float]
        _joined: JoinSucceeded | None
        _member: member.MemberState
        _closed: bool
        _shut_down: bool | None
        _wait_any: bool
        _attempt: int

        def _errors(self, doing: str) -> AbstractContextManager[None]: ...
        def _require_round(self, what: str) -> RoundResult: ...
        def _info(
            self, joined: JoinSucceeded, *, attempt: int = 0, timeout: float | None = None
        ) -> DynamicRendezvousInfo: ...

    def watch(self) -> RoundWatch:
        """One look at the round after this node's: closed? opened? how many wait there? And
        was the next in-place attempt of our round opened (``next_attempt``: the opener's
        reason; the attempt is :attr:`attempt` + 1)?

        The same batch reads the ring successor's heartbeat; the member machine
        (:mod:`tpelastic.core.rendezvous.member`) judges it and, when it is dead, reports it,
        which opens the next round (``next_opened`` is then ``"membership"``, or the reason of
        whoever opened it first). Costs one batch of 4-5 reads (one round trip where the store
        reads many keys at once), plus one of two writes for a report.

        Raises:
            RendezvousError: no round completed yet (call :meth:`next_rendezvous` first).
            RendezvousConnectionError, RendezvousStateError: as for :meth:`is_closed`.
        """
        self._require_round("watch")
        with self._errors("watching the next round"):
            event = member.LookRequested(now=self._clock(), attempt=self._attempt)
            self._member, looked = run_member(
                self._store, self._member, event, self.settings.config, self._clock
            )
        assert isinstance(looked, member.Looked)
        if looked.watch.closed is not None:
            self._closed = True
        return looked.watch

    def can_wait_for_change(self) -> bool:
        """Whether :meth:`wait_for_change` really blocks: the store holds a wait for any of
        several keys (``WaitAnyStore``, e.g. our TCPStore). Otherwise it returns False at once
        and the agent keeps looking periodically."""
        return self._wait_any

    def wait_for_change(self, timeout: float) -> bool:
        """Block until something a :meth:`watch` reports may have changed, or ``timeout`` s pass.

        One held store wait for any of the keys :meth:`watch` reads (``member.change_keys``):
        the rendezvous closed, the next round opened, the next in-place attempt opened (until a
        look has seen it), or (until a look has seen one) a node arrived at the next round. It
        decides nothing: True means "look now"; the look and the core decide what it means. It
        does not see a silent (dead) successor: only a look's heartbeat check does.

        Returns:
            True when one of the keys exists; False at the timeout, and at once when the store
            cannot hold such a wait, before the first round, or after :meth:`shutdown`.

        Raises:
            RendezvousConnectionError: the store could not be reached (or was closed by
                :meth:`shutdown` while waiting).
        """
        if not self._wait_any or self._joined is None or self._shut_down is not None:
            return False
        # The attempt this node runs now: a follow since the last look moves the wait on.
        keys = member.change_keys(evolve(self._member, attempt=self._attempt))
        with self._errors("waiting for a change to the next round"):
            return bool(self._store.wait_any(keys, timeout))  # type: ignore[attr-defined]

    def open_next_round(self, reason: str) -> None:
        """End the current world so every member rejoins (``scale_up``, ``failure``, ...).

        Raises:
            RendezvousError: no round completed yet.
            RendezvousConnectionError: the store could not be reached.
        """
        result = self._require_round("open_next_round")
        with self._errors("opening the next round"):
            execute_ops(self._store, membership.open_next_round_ops(self._keys, result, reason))

    @property
    def attempt(self) -> int:
        """The in-place attempt of this node's round it runs (0: the round's first start)."""
        return self._attempt

    def open_attempt(self, reason: str, *, attempt: int | None = None) -> int:
        """Restart our round in place: open its next attempt (``attempt``, default
        :attr:`attempt` + 1) for every member and move to it. First writer wins: a member that
        opened the same attempt at once spends nothing more.

        Returns:
            The attempt this node now runs.

        Raises:
            ValueError: ``attempt`` is not newer than :attr:`attempt`.
            RendezvousError: no round completed yet.
            RendezvousConnectionError: the store could not be reached (the attempt is then
                not ours: :attr:`attempt` stays).
        """
        result = self._require_round("open_attempt")
        nxt = self._attempt + 1 if attempt is None else attempt
        if nxt <= self._attempt:
            raise ValueError(f"attempt {nxt} is not newer than attempt {self._attempt}")
        with self._errors(f"opening attempt {nxt} of round {result.round_no}"):
            execute_ops(
                self._store, attempts.open_attempt_ops(self._keys, result.round_no, nxt, reason)
            )
        self._attempt = nxt
        return nxt

    def follow_attempt(self, attempt: int) -> None:
        """Move to ``attempt`` of our round, which a member opened (a look reported it). From
        attempt ``n`` a look reads only ``n + 1``; attempts are opened in order, so moving to
        the newest seen skips nothing a member still needs. Idempotent.

        Raises:
            ValueError: ``attempt`` is older than :attr:`attempt`.
            RendezvousError: no round completed yet.
        """
        self._require_round("follow_attempt")
        if attempt < self._attempt:
            raise ValueError(f"attempt {attempt} is older than attempt {self._attempt}")
        self._attempt = attempt

    def attempt_info(self, *, timeout: float) -> DynamicRendezvousInfo:
        """What the workers of our round's current attempt need: the attempt's own store
        namespace and a fresh bootstrap endpoint (rank 0 publishes a new free port under it;
        the others wait up to ``timeout`` s for it; call again to wait longer).

        Raises:
            RendezvousError: no round completed yet.
            RendezvousTimeoutError: rank 0 published nothing within ``timeout``.
            RendezvousConnectionError, RendezvousStateError: as for :meth:`next_rendezvous`.
        """
        self._require_round("attempt_info")
        assert self._joined is not None
        return self._info(self._joined, attempt=self._attempt, timeout=timeout)


__all__ = ["MemberActions"]
