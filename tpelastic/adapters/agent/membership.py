"""Membership: one agent's view of the rendezvous, as the rounds and signals the agent consumes.

Two kinds of handler are bridged:

* a **round-aware** handler (the dynamic one: it has ``watch``): rounds, the job-wide restart
  count and the bootstrap endpoint come from the handler; ``watch`` reports a close, the next
  round opening, nodes waiting and the round's next in-place attempt opening. When it can
  restart a round in place (``open_attempt``: :attr:`Membership.in_place`), a worker failure
  opens the round's next attempt and every member starts its workers again for it
  (:meth:`Membership.start_attempt`: the attempt's own namespace and bootstrap endpoint).
* any other handler (``static``, third-party): membership is fixed, so rounds are *attempts*
  counted here. Every attempt is announced under ``agent/attempt/<n>`` in the run's store with
  its restart count (the first writer wins, so all nodes agree), and rank 0 publishes a fresh
  bootstrap endpoint under ``agent/<n>/master``. A node restarting its workers thereby fences
  the others out of the old attempt, as a new round does with the dynamic handler.

Either way each attempt gets a clean namespace: a fresh port for the workers' own store, and
keys under the attempt's number.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from attrs import evolve, frozen

from tpelastic.adapters.agent.env import RoundFacts
from tpelastic.adapters.rendezvous.errors import (
    RendezvousConnectionError,
    RendezvousStateError,
    RendezvousTimeoutError,
    store_errors_as_rendezvous_errors,
)
from tpelastic.adapters.rendezvous.info import RendezvousInfo, RendezvousStoreInfo
from tpelastic.core.membership import MemberConfig
from tpelastic.core.rendezvous.records import (
    ClosedRecord,
    StateCorrupt,
    decode_closed,
    encode_closed,
)
from tpelastic.core.values import value_eq, value_hash, value_repr

# While a round watcher runs, the periodic look only times the ring successor's heartbeat; this
# bound keeps a crash seen within the keep-alive expiry plus 0.25 s, as without a watcher.
_HEARTBEAT_LOOK_MAX = 0.25
# A member waiting for rank 0's endpoint of a new attempt looks this often for what ends the
# wait otherwise (rank 0 found dead opens the next round; a newer attempt; a close).
_ATTEMPT_LOOK_EVERY = 0.5
# Added to a held failure's window: scheduling delay on a loaded machine (seconds).
_COLLATERAL_MARGIN = 0.5


@frozen(kw_only=True)
class Joined:
    """A completed round (or attempt) this node is part of."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    facts: RoundFacts
    store: Any  # the round's KeyValueStore: the exit barrier lives there


@frozen(kw_only=True)
class Look:
    """One look at what happened beyond the current round."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    closed: tuple[str, str] | None = None  # (outcome, reason) once the job is over
    next_opened: str | None = None  # why a newer round opened
    waiting: int = 0  # nodes waiting to join
    next_attempt: tuple[int, str] | None = None  # (attempt, why) once our round's next opened


class Membership:
    """Join rounds, watch for changes, close or leave, over one rendezvous handler.

    Args:
        handler: the rendezvous handler.
        master_addr, master_port: the user's fixed bootstrap endpoint, honoured exactly when
            both are given; otherwise rank 0 publishes a fresh free port each round.
        local_addr: the address rank 0 publishes (default: the handler's choice).
        bootstrap_timeout: how long non-zero ranks wait for rank 0's endpoint.
    """

    def __init__(
        self,
        handler: Any,
        *,
        master_addr: str | None = None,
        master_port: int | None = None,
        local_addr: str | None = None,
        bootstrap_timeout: float = 600.0,
    ) -> None:
        self.handler = handler
        self.round_aware = callable(getattr(handler, "watch", None))
        # Restarts a round's workers in place (attempts within a round) instead of re-joining.
        self.in_place = self.round_aware and callable(getattr(handler, "open_attempt", None))
        self._fixed = (master_addr, master_port) if master_addr and master_port else None
        self._local_addr = local_addr
        self._bootstrap_timeout = bootstrap_timeout
        self._info: RendezvousInfo | None = None
        self._joined: Joined | None = None
        self._attempt = -1  # fixed membership only: the attempt this node is in

    @property
    def hosts_store(self) -> bool:
        """Whether this agent runs the rendezvous store's server (peers depend on it)."""
        if self.round_aware:
            return getattr(self.handler, "store_host", None) is not None
        return bool(getattr(self.handler, "is_host", False))

    @property
    def joined(self) -> Joined | None:
        """The current round, once one completed."""
        return self._joined

    def join(self, *, failure: bool, reason: str | None = None) -> Joined:
        """Join the next round and block until it completes (bounded by the handler's timeouts).

        Raises:
            RendezvousError: any rendezvous failure (closed, timeout, connection, state).
        """
        if self.round_aware:
            why = reason or ("failure" if failure else None)
            info = (
                self.handler.next_rendezvous(reason=why) if why else self.handler.next_rendezvous()
            )
            round_no = int(getattr(info, "round", 0))
            restarts = int(getattr(info, "restart_count", 0))
        else:
            info = self.handler.next_rendezvous()
            round_no, restarts = self._next_attempt(info, failure)
        self._info = info
        bootstrap = self._bootstrap(info, round_no)
        facts = RoundFacts(
            round=round_no,
            group_rank=info.rank,
            group_world_size=info.world_size,
            restart_count=restarts,
            master_addr=bootstrap.master_addr,
            master_port=bootstrap.master_port,
            agent_store=bootstrap.agent_hosted,
        )
        self._joined = Joined(facts=facts, store=info.store)
        return self._joined

    def _next_attempt(self, info: RendezvousInfo, failure: bool) -> tuple[int, int]:
        store = info.store
        with store_errors_as_rendezvous_errors("announcing the next attempt"):
            latest = _int(store.get("agent/latest"), -1)
            # A peer that already opened a newer attempt reported the failure that ours echoes
            # (or a restart we are fenced out of): join that attempt and spend nothing more.
            attempt = latest if latest > self._attempt else self._attempt + 1
            previous = _int(store.get(f"agent/attempt/{attempt - 1}"), 0) if attempt else 0
            proposed = previous + (1 if failure and attempt > 0 else 0)
            _, agreed = store.set_if_absent(f"agent/attempt/{attempt}", str(proposed).encode())
            if _int(store.get("agent/latest"), -1) < attempt:
                store.set("agent/latest", str(attempt).encode())
        self._attempt = attempt
        return attempt, _int(agreed, proposed)

    def _bootstrap(self, info: RendezvousInfo, round_no: int) -> RendezvousStoreInfo:
        if self._fixed is not None:
            addr, port = self._fixed
            assert addr is not None and port is not None
            return RendezvousStoreInfo(addr, port)  # rank 0's worker hosts the user's endpoint
        if self.round_aware and info.bootstrap_store_info is not None:
            return info.bootstrap_store_info
        addr = self._local_addr or getattr(self.handler, "master_addr", None) or "127.0.0.1"
        found = RendezvousStoreInfo.build(
            info.rank,
            info.store,
            addr,
            key=f"agent/{round_no}/master",
            timeout=self._bootstrap_timeout,
        )
        return found

    def look(self) -> Look:
        """What changed beyond the current round: a close, a newer round, nodes waiting.

        Raises:
            RendezvousError: the store could not be read.
        """
        if self.round_aware:
            seen = self.handler.watch()
            closed = seen.closed
            why = getattr(seen, "next_attempt", None) if self.in_place else None
            return Look(
                closed=(closed.outcome, closed.reason) if closed is not None else None,
                next_opened=seen.next_opened,
                waiting=int(seen.waiting),
                next_attempt=(int(self.handler.attempt) + 1, why) if why is not None else None,
            )
        if self._info is None:
            return Look()
        with store_errors_as_rendezvous_errors("watching the rendezvous"):
            closed = self._info.store.get("agent/closed")
            latest = _int(self._info.store.get("agent/latest"), -1)
        if closed is not None:
            record = _closed_record(closed)
            return Look(closed=(record.outcome, record.reason))
        opened = "restart" if latest > self._attempt else None
        return Look(next_opened=opened, waiting=int(self.handler.num_nodes_waiting()))

    def can_wait_for_change(self) -> bool:
        """Whether :meth:`wait_for_change` really blocks (a round-aware handler over a store
        that holds a wait for any of several keys)."""
        check = getattr(self.handler, "can_wait_for_change", None)
        return self.round_aware and callable(check) and bool(check())

    def wait_for_change(self, timeout: float) -> bool:
        """Block until a :meth:`look` may see something new, or ``timeout`` s pass (False).

        False at once when :meth:`can_wait_for_change` is False.

        Raises:
            RendezvousError: the store could not be reached.
        """
        if not self.can_wait_for_change():
            return False
        return bool(self.handler.wait_for_change(timeout))

    def look_fallback(self) -> float:
        """How often a look is still due while a change watcher runs: it times the ring
        successor's heartbeat, so a crash is seen within the keep-alive expiry plus at most
        0.25 s (every heartbeat interval, at most every 0.25 s: the same as without a watcher)."""
        config = getattr(getattr(self.handler, "settings", None), "config", None)
        interval = getattr(config, "heartbeat_interval", None)
        return min(_HEARTBEAT_LOOK_MAX, float(interval)) if interval else _HEARTBEAT_LOOK_MAX

    def collateral_window(self) -> float:
        """How long after a worker failure a peer's loss still counts as its cause: the latest
        a ring predecessor reports a peer that died at the failure (its last beat may be an
        interval before, and it is looked at every interval or 0.25 s) plus a margin for a
        loaded machine: heartbeat timeout + 2 intervals + 0.5 s. 0.0 without a heartbeat
        (fixed membership never holds)."""
        config = getattr(getattr(self.handler, "settings", None), "config", None)
        timeout = getattr(config, "heartbeat_timeout", None)
        interval = getattr(config, "heartbeat_interval", None)
        if not self.round_aware or not timeout or not interval:
            return 0.0
        return float(timeout) + 2 * float(interval) + _COLLATERAL_MARGIN

    def member_config(self) -> MemberConfig:
        """The membership core's config: the handler's heartbeat (None: it keeps none)."""
        config = getattr(getattr(self.handler, "settings", None), "config", None)
        timeout = getattr(config, "heartbeat_timeout", None)
        interval = getattr(config, "heartbeat_interval", None)
        if not self.round_aware or not timeout or not interval:
            return MemberConfig()
        return MemberConfig(heartbeat_timeout=float(timeout), heartbeat_interval=float(interval))

    def last_beat(self) -> float | None:
        """When this node's last heartbeat landed (monotonic), None without a keep-alive. A
        handler that only answers ``keep_alive_healthy`` reads as long ago once it is False."""
        read = getattr(self.handler, "keep_alive_last_beat", None)
        if callable(read):
            beat = read()
            return None if beat is None else float(beat)
        check = getattr(self.handler, "keep_alive_healthy", None)
        if callable(check) and not check():
            return float("-inf")
        return None

    def open_next_round(self, reason: str) -> None:
        """Open the next round so waiting nodes can join (round-aware handlers only)."""
        opener = getattr(self.handler, "open_next_round", None)
        if callable(opener):
            opener(reason)

    def open_attempt(self, attempt: int, reason: str) -> None:
        """Open in-place ``attempt`` of the current round for every member (first writer wins).

        Raises:
            RendezvousError: the store could not be reached.
        """
        self.handler.open_attempt(reason, attempt=attempt)

    def start_attempt(
        self, attempt: int, restart_count: int, look: Callable[[float], Any | None]
    ) -> Joined | Any:
        """Move to in-place ``attempt`` of the current round and agree on its bootstrap endpoint
        (rank 0 publishes a fresh one under the attempt's namespace; a user-fixed endpoint is
        honoured). Members wait for rank 0's at most the bootstrap timeout, asking ``look(now)``
        every half second for what ends the wait otherwise (rank 0 found dead opens the next
        round, a newer attempt, a close).

        Returns:
            The attempt as the current :class:`Joined` (its store holds the attempt's exit
            barrier), or what ``look`` saw instead.

        Raises:
            RendezvousTimeoutError: rank 0 published nothing within the bootstrap timeout.
            RendezvousError: the store could not be reached.
        """
        assert self._joined is not None and self.in_place
        self.handler.follow_attempt(attempt)
        deadline = time.monotonic() + self._bootstrap_timeout
        while True:
            try:
                info = self.handler.attempt_info(timeout=_ATTEMPT_LOOK_EVERY)
                break
            except RendezvousTimeoutError:
                now = time.monotonic()
                if now >= deadline:
                    raise
                seen = look(now)
                if seen is not None:
                    return seen
        self._info = info
        bootstrap = self._bootstrap(info, self._joined.facts.round)
        facts = evolve(
            self._joined.facts,
            attempt=attempt,
            restart_count=restart_count,
            master_addr=bootstrap.master_addr,
            master_port=bootstrap.master_port,
            agent_store=bootstrap.agent_hosted,
        )
        self._joined = Joined(facts=facts, store=info.store)
        return self._joined

    def close(self, outcome: str, reason: str) -> None:
        """Close the rendezvous for every node: the job is over with ``outcome``.

        Raises:
            RendezvousError: the store could not be reached.
        """
        if self.round_aware:
            self.handler.set_closed(outcome, reason)
            return
        if self._info is not None:
            record = encode_closed(ClosedRecord(outcome=outcome, reason=reason))
            with store_errors_as_rendezvous_errors("closing the rendezvous"):
                self._info.store.set_if_absent("agent/closed", record)
        self.handler.set_closed()

    def leave(self) -> None:
        """Leave gracefully (the others see a membership change); never raises."""
        try:
            self.handler.shutdown()
        except Exception:  # leaving must not fail a node that is going anyway
            pass


def _closed_record(blob: bytes) -> ClosedRecord:
    try:
        return decode_closed(blob)
    except StateCorrupt as error:
        raise RendezvousStateError(f"corrupt rendezvous state at 'agent/closed': {error}") from None


def _int(blob: bytes | None, default: int) -> int:
    if blob is None:
        return default
    try:
        return int(blob.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise RendezvousStateError(f"expected a decimal counter, got {blob[:40]!r}") from None


def wait_counter(store: Any, key: str, target: int, deadline: float, poll: float) -> bool:
    """Wait until the counter at ``key`` reaches ``target`` or ``deadline`` (monotonic) passes.

    Raises:
        RendezvousConnectionError: the store could not be reached.
    """
    while True:
        try:
            value = _int(store.get(key), 0)
        except RendezvousStateError:
            raise
        except Exception as error:
            raise RendezvousConnectionError(f"reading {key!r}: {error}") from error
        if value >= target:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)


__all__ = ["Joined", "Look", "Membership", "wait_counter"]
