"""Membership: one agent's view of the rendezvous, as the rounds and signals the agent consumes.

Two kinds of handler are bridged, over one attempt protocol (``core/rendezvous/attempts.py``):

* a **round-aware** handler (the dynamic one: it has ``watch``): rounds, the job-wide restart
  count and the bootstrap endpoint come from the handler; ``watch`` reports a close, the next
  round opening, nodes waiting and the round's next in-place attempt opening.
* any other handler (``static``, third-party): membership is fixed, so the job is one round
  (round 0) whose every restart is an in-place attempt, written here in the handler's store
  under the core's keys (``RunKeys(run_id)``) and records: the attempt keys, the closed record
  and rank 0's bootstrap endpoint under each attempt's own namespace. A look is the core's
  ``watch_ops`` of round 0; a node that joins late comes into the newest opened attempt.

Either way a worker failure opens the round's next attempt (:meth:`Membership.open_attempt`)
and every member starts its workers again for it (:meth:`Membership.enter_attempt`, then
:meth:`Membership.attempt_joined`: the attempt's own namespace and bootstrap endpoint), so each
attempt gets a clean namespace: a fresh port for the workers' own store, and keys under the
attempt's number.
"""

from __future__ import annotations

from typing import Any

from attrs import evolve, frozen

from tpelastic.adapters.agent.env import RoundFacts
from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock
from tpelastic.adapters.rendezvous.driver import execute_ops
from tpelastic.adapters.rendezvous.errors import (
    RendezvousStateError,
    store_errors_as_rendezvous_errors,
)
from tpelastic.adapters.rendezvous.info import RendezvousInfo, RendezvousStoreInfo
from tpelastic.adapters.stores.prefixed import PrefixedStore
from tpelastic.core.membership import MemberConfig
from tpelastic.core.rendezvous import attempts, membership
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.liveness import peer_loss_window
from tpelastic.core.rendezvous.records import (
    ClosedRecord,
    RoundResult,
    StateCorrupt,
    encode_closed,
)
from tpelastic.core.values import value_eq, value_hash, value_repr

# Fixed membership is one round, numbered 0, with no restart before its attempts.
_FIXED_ROUND = RoundResult(round_no=0)


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
        clock: the agent's clock (bootstrap deadlines).
    """

    def __init__(
        self,
        handler: Any,
        *,
        master_addr: str | None = None,
        master_port: int | None = None,
        local_addr: str | None = None,
        bootstrap_timeout: float = 600.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.handler = handler
        self._clock = clock
        self.round_aware = callable(getattr(handler, "watch", None))
        # Restarts a round's workers in place (attempts within a round) instead of re-joining:
        # always with fixed membership (its one round's attempts are written here).
        opens = callable(getattr(handler, "open_attempt", None))
        self.in_place = opens if self.round_aware else True
        self._fixed = (master_addr, master_port) if master_addr and master_port else None
        self._local_addr = local_addr
        self._bootstrap_timeout = bootstrap_timeout
        self._info: RendezvousInfo | None = None
        self._joined: Joined | None = None
        # Fixed membership only: the run's keys in the handler's store, and the attempt of
        # round 0 this node runs.
        self._keys: RunKeys | None = None
        self._attempt = 0

    @property
    def hosts_store(self) -> bool:
        """Whether this agent runs the rendezvous store's server (peers depend on it)."""
        if self.round_aware:
            return getattr(self.handler, "store_host", None) is not None
        return bool(getattr(self.handler, "is_host", False))

    def wait_until_alone(self, timeout: float) -> bool:
        """For the store's host: wait until no peer is connected to its server any more, at
        most ``timeout`` seconds (True at once when it hosts none, or cannot tell)."""
        host = getattr(getattr(self.handler, "store_host", None), "store", None)
        wait = getattr(host, "wait_until_alone", None)
        return True if wait is None else bool(wait(timeout))

    @property
    def joined(self) -> Joined | None:
        """The current round, once one completed."""
        return self._joined

    def join(
        self, *, failure: bool, reason: str | None = None, charged_attempt: int | None = None
    ) -> Joined:
        """Join the next round and block until it completes (bounded by the handler's timeouts).

        With fixed membership the round is round 0 and this node comes into its newest opened
        attempt. It never reports a failure: fixed membership restarts only in place, so the
        attempt after a failure is the agent's to open (its ``OpenAttempt``, specs/agent.md A16).
        ``charged_attempt`` (a peer's loss refunded the last round's newer in-place attempts)
        goes to a round-aware handler that takes it, as the highest attempt it reports spent.

        Raises:
            RendezvousError: any rendezvous failure (closed, timeout, connection, state).
            ValueError: ``failure`` with fixed membership (a driver bug: see above).
        """
        attempt = 0
        self._keys = RunKeys(str(self.handler.get_run_id()))
        if self.round_aware:
            why = reason or ("failure" if failure else None)
            extra: dict[str, Any] = {"reason": why} if why else {}
            if charged_attempt is not None and self._takes_charged_attempt():
                extra["charged_attempt"] = charged_attempt
            info = self.handler.next_rendezvous(**extra)
            round_no = int(getattr(info, "round", 0))
            restarts = int(getattr(info, "restart_count", 0))
            store = info.store
        else:
            if failure:
                raise ValueError("fixed membership restarts in place: a join reports no failure")
            info = self.handler.next_rendezvous()
            attempt = self._newest_attempt(info.store)
            self._attempt = attempt
            round_no, restarts = 0, attempts.attempt_restart_count(_FIXED_ROUND, attempt)
            store = self._attempt_store(info.store, attempt)
        self._info = info
        bootstrap = self._bootstrap(info, round_no, attempt)
        facts = RoundFacts(
            round=round_no,
            group_rank=info.rank,
            group_world_size=info.world_size,
            restart_count=restarts,
            master_addr=bootstrap.master_addr,
            master_port=bootstrap.master_port,
            attempt=attempt,
            agent_store=bootstrap.agent_hosted,
        )
        self._joined = Joined(facts=facts, store=store)
        return self._joined

    def _takes_charged_attempt(self) -> bool:
        """Does the handler's ``next_rendezvous`` take ``charged_attempt`` (ours does; a
        third-party handler that restarts in place may not)? Asked only for a refund."""
        import inspect

        try:
            params = inspect.signature(self.handler.next_rendezvous).parameters
        except (TypeError, ValueError):
            return False
        return self.in_place and "charged_attempt" in params

    def _newest_attempt(self, store: Any) -> int:
        assert self._keys is not None
        newest, more = 0, True
        with store_errors_as_rendezvous_errors("reading the newest attempt"):
            while more:
                ops = attempts.newest_attempt_ops(self._keys, 0, newest)
                try:
                    newest, more = attempts.newest_attempt(newest, execute_ops(store, ops))
                except StateCorrupt as error:
                    raise RendezvousStateError(f"corrupt rendezvous state: {error}") from None
        return newest

    def _open_fixed(self, store: Any, attempt: int, reason: str) -> None:
        assert self._keys is not None
        ops = attempts.open_attempt_ops(self._keys, 0, attempt, reason)
        with store_errors_as_rendezvous_errors(f"opening attempt {attempt}"):
            execute_ops(store, ops)

    def _attempt_store(self, store: Any, attempt: int) -> Any:
        assert self._keys is not None
        return PrefixedStore(store, self._keys.work_prefix(0, attempt))

    def _bootstrap(self, info: RendezvousInfo, round_no: int, attempt: int) -> RendezvousStoreInfo:
        if self._fixed is not None:
            addr, port = self._fixed
            return RendezvousStoreInfo(addr, port)  # rank 0's worker hosts the user's endpoint
        if self.round_aware and info.bootstrap_store_info is not None:
            return info.bootstrap_store_info
        return self._fixed_endpoint(info, round_no, attempt, self._bootstrap_timeout)

    def _fixed_endpoint(
        self, info: RendezvousInfo, round_no: int, attempt: int, timeout: float
    ) -> RendezvousStoreInfo:
        """Rank 0 publishes a fresh endpoint under the attempt's namespace; the others wait
        up to ``timeout`` for it (``RendezvousTimeoutError`` after it)."""
        assert self._keys is not None
        addr = self._local_addr or getattr(self.handler, "master_addr", None) or "127.0.0.1"
        return RendezvousStoreInfo.build(
            info.rank,
            info.store,
            addr,
            key=f"{self._keys.work_prefix(round_no, attempt)}/master",
            timeout=timeout,
        )

    def look(self) -> Look:
        """What changed beyond the current round: a close, a newer round, nodes waiting, the
        round's next in-place attempt.

        Raises:
            RendezvousError: the store could not be read.
        """
        if self.round_aware:
            seen = self.handler.watch()
            attempt = int(self.handler.attempt) if self.in_place else 0
        elif self._info is None or self._keys is None:
            return Look()
        else:
            ops = membership.watch_ops(self._keys, 0, self._attempt)
            with store_errors_as_rendezvous_errors("watching the rendezvous"):
                replies = execute_ops(self._info.store, ops)
            try:
                seen = membership.read_watch_at(ops, replies)
            except StateCorrupt as error:
                raise RendezvousStateError(str(error)) from None
            attempt = self._attempt
        closed = seen.closed
        why = getattr(seen, "next_attempt", None) if self.in_place else None
        waiting = int(seen.waiting) if self.round_aware else int(self.handler.num_nodes_waiting())
        return Look(
            closed=(closed.outcome, closed.reason) if closed is not None else None,
            next_opened=seen.next_opened,
            waiting=waiting,
            next_attempt=(attempt + 1, why) if why is not None else None,
        )

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

    def closed_reason(self) -> str | None:
        """``outcome: reason`` of the run's close, read without a round (a join that found the
        run closed names why); None when it cannot tell. Never raises."""
        read = getattr(self.handler, "closed_record", None)
        try:
            record = read() if callable(read) else None
        except RendezvousStateError as error:  # the closed record itself is what is corrupt
            return str(error)
        except Exception:  # the store may be gone with the job
            return None
        return f"{record.outcome}: {record.reason}".rstrip(": ") if record is not None else None

    def heartbeat_interval(self) -> float | None:
        """The handler's heartbeat interval (None: it keeps no heartbeat of this node)."""
        return self._heartbeat()[1]

    def collateral_window(self) -> float:
        """How long after a worker failure a peer's loss still counts as its cause
        (``liveness.peer_loss_window``); 0.0 without a heartbeat (fixed membership never
        holds)."""
        timeout, interval = self._heartbeat()
        if not self.round_aware or not timeout or not interval:
            return 0.0
        return peer_loss_window(timeout, interval)

    def _heartbeat(self) -> tuple[float | None, float | None]:
        config = getattr(getattr(self.handler, "settings", None), "config", None)
        timeout = getattr(config, "heartbeat_timeout", None)
        interval = getattr(config, "heartbeat_interval", None)
        return (float(timeout) if timeout else None, float(interval) if interval else None)

    def member_config(self) -> MemberConfig:
        """The membership core's config: the handler's own (the dynamic handler's
        ``member_config``), else its heartbeat (None: it keeps none)."""
        own = getattr(self.handler, "member_config", None)
        if self.round_aware and callable(own):
            found = own()
            if isinstance(found, MemberConfig):
                return found
        timeout, interval = self._heartbeat()
        if not self.round_aware or not timeout or not interval:
            return MemberConfig()
        config = getattr(getattr(self.handler, "settings", None), "config", None)
        join_timeout = getattr(config, "join_timeout", None)
        return MemberConfig(
            heartbeat_timeout=timeout,
            heartbeat_interval=interval,
            hosts_store=self.hosts_store,
            fence_timeout=float(join_timeout) if join_timeout else None,
        )

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

    def store_silent_until(self) -> float | None:
        """The last instant a look proved the store answered nobody until (monotonic), None
        when none did or the handler cannot tell."""
        read = getattr(self.handler, "store_silent_until", None)
        if callable(read):
            until = read()
            return None if until is None else float(until)
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
        if self.round_aware:
            self.handler.open_attempt(reason, attempt=attempt)
        else:
            assert self._info is not None
            self._open_fixed(self._info.store, attempt, reason)

    @property
    def bootstrap_timeout(self) -> float:
        """How long members wait for rank 0's bootstrap endpoint, in all."""
        return self._bootstrap_timeout

    def enter_attempt(self, attempt: int) -> Joined | None:
        """Move to in-place ``attempt`` of the current round. The attempt the last join came
        into is the current one already: its :class:`Joined`. Otherwise None: the attempt's
        endpoint is still to be agreed (:meth:`attempt_joined`).

        Raises:
            RendezvousError: the handler has no round.
        """
        assert self._joined is not None and self.in_place
        if self._joined.facts.attempt == attempt:
            return self._joined
        if self.round_aware:
            self.handler.follow_attempt(attempt)
        else:
            self._attempt = attempt
        return None

    def attempt_joined(self, attempt: int, restart_count: int, timeout: float) -> Joined:
        """Agree on the bootstrap endpoint of ``attempt`` (entered with :meth:`enter_attempt`):
        rank 0 publishes a fresh one under the attempt's namespace at once, the others wait up
        to ``timeout`` s for it; a user-fixed endpoint is honoured. The attempt becomes the
        current :class:`Joined` (its store holds the attempt's exit barrier).

        Raises:
            RendezvousTimeoutError: rank 0 published nothing within ``timeout`` (ask again to
                wait longer).
            RendezvousError: the store could not be reached, or holds no valid endpoint.
        """
        assert self._joined is not None
        store, endpoint = self._attempt_endpoint(attempt, timeout)
        facts = evolve(
            self._joined.facts,
            attempt=attempt,
            restart_count=restart_count,
            master_addr=endpoint.master_addr,
            master_port=endpoint.master_port,
            agent_store=endpoint.agent_hosted,
        )
        self._joined = Joined(facts=facts, store=store)
        return self._joined

    def _attempt_endpoint(self, attempt: int, timeout: float) -> tuple[Any, RendezvousStoreInfo]:
        """The attempt's store and rank 0's endpoint for it (waiting up to ``timeout``)."""
        found: RendezvousStoreInfo | None = None
        if self.round_aware:
            info = self.handler.attempt_info(timeout=timeout)
            self._info = info
            found = info.bootstrap_store_info
            store = info.store
        else:
            assert self._info is not None
            store = self._attempt_store(self._info.store, attempt)
            if self._fixed is None:
                found = self._fixed_endpoint(self._info, 0, attempt, timeout)
        if self._fixed is not None:
            return store, RendezvousStoreInfo(*self._fixed)  # rank 0's worker hosts it
        assert found is not None
        return store, found

    def close(self, outcome: str, reason: str) -> None:
        """Close the rendezvous for every node: the job is over with ``outcome``.

        Raises:
            RendezvousError: the store could not be reached.
        """
        if self.round_aware:
            self.handler.set_closed(outcome, reason)
            return
        if self._info is not None and self._keys is not None:
            record = encode_closed(ClosedRecord(outcome=outcome, reason=reason))
            with store_errors_as_rendezvous_errors("closing the rendezvous"):
                self._info.store.set_if_absent(self._keys.closed(), record)
        self.handler.set_closed()

    def leave(self) -> None:
        """Leave gracefully (the others see a membership change); never raises."""
        try:
            self.handler.shutdown()
        except Exception:  # leaving must not fail a node that is going anyway
            pass


def counter_value(blob: bytes | None, default: int) -> int:
    """A counter's stored value (``default`` when absent).

    Raises:
        RendezvousStateError: it is not a decimal number.
    """
    if blob is None:
        return default
    try:
        return int(blob.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise RendezvousStateError(f"expected a decimal counter, got {blob[:40]!r}") from None


__all__ = ["Joined", "Look", "Membership", "counter_value"]
