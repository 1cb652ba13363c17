"""DynamicRendezvousHandler: elastic membership over a key/value store (backends tcp, file).

The pure join machine (:mod:`tpelastic.core.rendezvous`) decides everything; this handler runs it
through :func:`~tpelastic.adapters.rendezvous.driver.run_join`, keeps the node's heartbeat going
with a background :class:`~tpelastic.adapters.rendezvous.driver.KeepAlive`, and carries out the
one-shot membership writes (leave, report a dead peer, open the next round, close) that
:mod:`tpelastic.core.rendezvous.membership` describes. See ``specs/rendezvous_join.md``.

An agent calls :meth:`~DynamicRendezvousHandler.next_rendezvous`, starts its workers, then calls
:meth:`~DynamicRendezvousHandler.watch` once in a while (every heartbeat interval or so): when it
reports ``next_opened`` the world is over and the agent stops its workers and rejoins; when it
reports waiting nodes, the agent may open the next round to admit them. Where the store holds a
wait for any of several keys (``WaitAnyStore``: our TCPStore), the agent also blocks in
:meth:`~DynamicRendezvousHandler.wait_for_change` on a thread and looks the moment it returns.

The member's side of the round (``watch``, ``wait_for_change``, ``open_next_round`` and the
in-place attempts) carries out the member machine (:mod:`tpelastic.core.rendezvous.member`):
the look, the ring successor's liveness and the report of its death are rows there.

A worker failure restarts the round *in place* (see :mod:`tpelastic.core.rendezvous.attempts`):
the failed node calls :meth:`~DynamicRendezvousHandler.open_attempt`, every other member sees
``next_attempt`` in its look and calls :meth:`~DynamicRendezvousHandler.follow_attempt`; then each
asks :meth:`~DynamicRendezvousHandler.attempt_info` for the attempt's own store namespace and a
fresh bootstrap endpoint. Same members, ranks and world; one store write and one wake-up each.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from attrs import evolve, field, frozen

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock, KeyValueStore
from tpelastic.adapters.rendezvous.backends import (
    C10dRendezvousBackend,
    StoreRendezvousBackend,
    supports_leases,
    supports_wait_any,
)
from tpelastic.adapters.rendezvous.bootstrap import BootstrapHost
from tpelastic.adapters.rendezvous.driver import (
    JoinStepRecorder,
    KeepAlive,
    execute_ops,
    run_join,
    run_member,
)
from tpelastic.adapters.rendezvous.errors import (
    RendezvousClosedError,
    RendezvousError,
    RendezvousGracefulExitError,
    RendezvousStateError,
    RendezvousTimeoutError,
    store_errors_as_rendezvous_errors,
)
from tpelastic.adapters.rendezvous.handler import RendezvousHandler
from tpelastic.adapters.rendezvous.info import RendezvousInfo, RendezvousStoreInfo
from tpelastic.adapters.rendezvous.parameters import RendezvousParameters, RendezvousTimeout
from tpelastic.adapters.rendezvous.settings import RendezvousSettings
from tpelastic.adapters.stores.prefixed import PrefixedStore
from tpelastic.core.membership import KeepAliveRead, MemberConfig, keep_alive_holds
from tpelastic.core.rendezvous import attempts, member, membership, peer_wait
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.membership import RoundWatch
from tpelastic.core.rendezvous.ops import JoinSucceeded
from tpelastic.core.rendezvous.records import (
    ClosedRecord,
    RoundResult,
    StateCorrupt,
    decode_closed,
    decode_counter,
)
from tpelastic.core.rendezvous.state import JOIN_REASONS
from tpelastic.core.values import value_eq, value_hash, value_repr

log = logging.getLogger(__name__)

# How long shutdown() may take: its writes (a leave) run this long at most, then the store is
# closed under them, which ends every call still blocked in it. A node that is going must not
# wait on a store that is gone or paused (its peers find it dead by its heartbeat instead).
SHUTDOWN_BUDGET = 1.0
# How long shutdown() waits for the heartbeat thread (a daemon) once asked to stop.
_KEEP_ALIVE_JOIN = 0.2


def default_node_id() -> str:
    """``host:pid:random``: unique per process, and readable in logs. No DNS lookup."""
    # os.urandom is what secrets.token_hex reads; importing secrets (hmac, hashlib) costs
    # every launch a few milliseconds.
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"


@frozen
class DynamicRendezvousInfo(RendezvousInfo):
    """A :class:`RendezvousInfo` plus what the dynamic backend knows about the round.

    Attributes:
        round: the completed round's number (increases with every re-rendezvous).
        restart_count: job-wide restarts so far: one per round after a reported worker failure
            and one per in-place attempt (the round's count plus ``attempt``).
        attempt: the round's in-place attempt this info is for (0: the round's first start).
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    round: int = field(default=0, kw_only=True)
    restart_count: int = field(default=0, kw_only=True)
    attempt: int = field(default=0, kw_only=True)


# How long a member waits for rank 0's endpoint after a join without a join timeout.
_ENDPOINT_WAIT = 600.0


def _wait_step(
    state: peer_wait.PeerWaitState, event: object, config: peer_wait.PeerWaitConfig
) -> tuple[peer_wait.PeerWaitState, object]:
    result = peer_wait.step(state, event, config)
    (due,) = result.effects  # every row of the wait orders exactly one thing
    return result.state, due


class DynamicRendezvousHandler(RendezvousHandler):
    """Rounds of membership that change as nodes join, leave, fail or die.

    Args:
        run_id: the job's id (no ``/``); every agent of the job uses the same one.
        store: the run's store (a backend from :mod:`backends`, or any ``KeyValueStore``).
            The handler owns it: :meth:`shutdown` closes it.
        config: node bounds and timeouts (see :class:`RendezvousConfig`). When ``store`` has
            leases (:class:`~tpelastic.adapters.rendezvous.backends.LeasedStore`, e.g. etcd),
            liveness is by lease: ``leased_liveness`` is switched on.
        backend_name: what :meth:`get_backend` answers (``tcp``, ``c10d``, ``file``, ...).
        node_id: this node's id in the run; default :func:`default_node_id`.
        local_addr: the address others reach this node at; rank 0 publishes it as the
            workers' ``MASTER_ADDR`` (default: the host name).
        store_host: the object hosting the store server when this process hosts it (kept so
            the agent can tell; the server stops when the handler shuts down).
        bootstrap_host: hosts the workers' bootstrap store while this node is rank 0 (a fresh
            server per attempt; stopped at shutdown); None: rank 0's worker hosts it.
        clock: the node's clock (keep-alive and liveness timing); the agent's must be the same.

    Raises:
        ValueError: a bad run id.
    """

    def __init__(
        self,
        run_id: str,
        store: KeyValueStore,
        config: RendezvousConfig,
        *,
        backend_name: str,
        node_id: str | None = None,
        local_addr: str | None = None,
        store_host: object | None = None,
        bootstrap_host: BootstrapHost | None = None,
        clock: Clock = SYSTEM_CLOCK,
        record_join_step: JoinStepRecorder | None = None,
    ) -> None:
        self.record_join_step = record_join_step
        """Called with every step of this node's joins (``rdzv.step`` events); None: off. The
        agent sets it when its events are on."""
        if supports_leases(store) and not config.leased_liveness:
            # Every node of a run uses the same backend, so all of them judge liveness alike.
            config = evolve(config, leased_liveness=True)
        self.settings = RendezvousSettings.from_config(run_id, config)
        self.node_id = node_id or default_node_id()
        self.store_host = store_host
        self.bootstrap_host = bootstrap_host
        self._keys = RunKeys(run_id)
        self._store = store
        self._backend_name = backend_name
        self._local_addr = local_addr
        self._clock = clock
        self._keep_alive: KeepAlive | None = None
        self._keep_alive_started = 0.0
        self._joined: JoinSucceeded | None = None
        # The member machine's view of our round (its looks, the ring successor's sightings,
        # what looks saw present); a fresh one after every completed join.
        self._member = member.member_state(
            self._keys, self.node_id, hosts_store=self.store_host is not None
        )
        self._closed = False
        self._shut_down: bool | None = None  # None: running; else shutdown()'s answer
        self._wait_any = supports_wait_any(store)
        # The in-place attempt of our round this node runs (0 after every next_rendezvous).
        self._attempt = 0

    @classmethod
    def from_parameters(
        cls,
        params: RendezvousParameters,
        store: KeyValueStore,
        *,
        node_id: str | None = None,
        store_host: object | None = None,
        bootstrap_host: BootstrapHost | None = None,
    ) -> DynamicRendezvousHandler:
        """A handler for ``params`` over ``store`` (see :meth:`RendezvousSettings.from_parameters`).

        Raises:
            ValueError: parameters the dynamic backend cannot use, in one line.
        """
        settings = RendezvousSettings.from_parameters(params)
        return cls(
            settings.run_id,
            store,
            settings.config,
            backend_name=params.backend,
            node_id=node_id,
            local_addr=params.local_addr,
            store_host=store_host,
            bootstrap_host=bootstrap_host,
        )

    @classmethod
    def from_backend(
        cls,
        run_id: str,
        store: object,
        backend: KeyValueStore | None,
        min_nodes: int,
        max_nodes: int,
        local_addr: str | None = None,
        timeout: RendezvousTimeout | None = None,
        keep_alive_interval: float = 5,
        keep_alive_max_attempt: int = 3,
    ) -> DynamicRendezvousHandler:
        """torch's constructor: a handler over ``backend`` (e.g. a ``C10dRendezvousBackend``).

        The rendezvous state and the workers' bootstrap both live in ``backend``'s store;
        ``store`` is used (wrapped as a ``C10dRendezvousBackend``) only when ``backend`` is None.

        Raises:
            ValueError: bad bounds or timeouts, or a bad run id.
        """
        if backend is None:
            backend = C10dRendezvousBackend(store, run_id)
        timeout = timeout or RendezvousTimeout()
        config = RendezvousConfig(
            min_nodes=min_nodes,
            max_nodes=max_nodes,
            join_timeout=timeout.join.total_seconds(),
            last_call_timeout=timeout.last_call.total_seconds(),
            heartbeat_interval=float(keep_alive_interval),
            heartbeat_timeout=float(keep_alive_interval) * keep_alive_max_attempt,
        )
        name = str(getattr(backend, "name", "c10d"))
        return cls(run_id, backend, config, backend_name=name, local_addr=local_addr)

    # --- the reference interface ----------------------------------------------------------------

    def get_backend(self) -> str:
        return self._backend_name

    def get_run_id(self) -> str:
        return self.settings.run_id

    @property
    def store(self) -> KeyValueStore:
        """The rendezvous store (agents publish their status records to it)."""
        return self._store

    @property
    def result(self) -> RoundResult | None:
        """The last round this node completed, or None before the first."""
        return self._joined.result if self._joined else None

    def next_rendezvous(
        self, *, reason: str | None = None, charged_attempt: int | None = None
    ) -> DynamicRendezvousInfo:
        """Join the forming round and block until it completes (at most ``join_timeout``).

        Args:
            reason: why this node (re)joins: ``first``/``rejoin`` (the default on the first and
                later calls), ``failure`` (this node's workers failed: one restart is counted),
                ``scale_up`` (opening the round for waiting nodes) or ``membership`` (a peer
                left or died). The last three end the current world for every member.
            charged_attempt: the highest in-place attempt of the last round to report as spent
                (the agent found the newer ones caused by a peer's loss); None: every attempt
                this node ran or saw opened.

        Raises:
            RendezvousClosedError: the rendezvous is closed.
            RendezvousJoinTimeoutError: no round completed within the join timeout.
            RendezvousTimeoutError: rank 0 did not publish the workers' bootstrap endpoint
                within the join timeout (a look every ``takeover_delay`` meanwhile; when one
                finds the round over, this node joins the next one instead).
            RendezvousConnectionError: the store could not be reached (a join that loses the
                store after arriving retries until its deadline, taking up its place again).
            RendezvousStateError: the shared state is unreadable (foreign bytes, newer schema).
            RendezvousGracefulExitError: this handler was shut down.
            ValueError: an unknown ``reason``.
        """
        self._check_running()
        if reason is None:
            reason = "first" if self._joined is None else "rejoin"
        if reason not in JOIN_REASONS:
            raise ValueError(f"join reason must be one of {sorted(JOIN_REASONS)}, got {reason!r}")
        self._start_keep_alive()
        while True:
            joined = self._join(reason, charged_attempt)
            info = self._joined_info(joined)
            if info is not None:
                return info
            # The round ended before rank 0 published its endpoint (rank 0 died, the run
            # moved on): join what forms next, as the agent would on that look.
            reason, charged_attempt = "rejoin", None

    def _join(self, reason: str, charged_attempt: int | None) -> JoinSucceeded:
        previous = self._joined
        joined = run_join(
            self._store,
            self.settings.config,
            run_id=self.settings.run_id,
            node=self.node_id,
            addr=self._local_addr or "",
            from_round=previous.result.round_no if previous else None,
            held=previous.result if previous else None,
            reason=reason,
            # The attempts spent in our last round: its closer carries them into the new count.
            attempt=self._spent_attempts(charged_attempt),
            clock=self._clock,
            # A join that loses the store resumes the node's place only while its own
            # heartbeats held: otherwise a peer may already have found it dead.
            heartbeats_held=self.keep_alive_healthy,
            record_step=self.record_join_step,
        )
        self._joined = joined
        self._member = member.member_state(
            self._keys, self.node_id, joined.result, hosts_store=self.store_host is not None
        )
        self._attempt = 0
        return joined

    def _joined_info(self, joined: JoinSucceeded) -> DynamicRendezvousInfo | None:
        """The round's info once rank 0's endpoint is in. The core's bounded wait decides
        (:mod:`tpelastic.core.rendezvous.peer_wait`): slices of ``takeover_delay``, each
        followed by a look, for up to the join timeout; None when a look found the round
        over first (closed: raises), ``RendezvousTimeoutError`` when the wait is over. Rank 0
        answers at once."""
        config = self.settings.config
        slice_s = config.takeover_delay
        wait = peer_wait.PeerWaitConfig(
            timeout=max(config.join_timeout or _ENDPOINT_WAIT, slice_s), look_every=slice_s
        )
        what = f"rank 0's endpoint of round {joined.result.round_no}"
        state, due = _wait_step(
            peer_wait.PeerWaitState(),
            peer_wait.PeerWaitRequested(now=self._clock.now(), what=what),
            wait,
        )
        while True:
            now = self._clock.now()
            if isinstance(due, peer_wait.AwaitPeer):
                try:
                    info = self._info(joined, timeout=max(0.0, self._clock.remaining(due.until)))
                except RendezvousTimeoutError:
                    state, due = _wait_step(state, peer_wait.PeerSilent(now=now), wait)
                    continue
                return info
            if isinstance(due, peer_wait.LookDue):
                seen = self.watch()
                if seen.closed is not None:
                    raise RendezvousClosedError(f"the run closed ({seen.closed.outcome})")
                news = seen.next_opened is not None or seen.next_attempt is not None
                state, due = _wait_step(state, peer_wait.LookAnswered(now=now, news=news), wait)
                continue
            if isinstance(due, peer_wait.WaitInterrupted):
                return None
            assert isinstance(due, peer_wait.PeerWaitFailed), due
            raise RendezvousTimeoutError(due.reason)

    def _spent_attempts(self, charged: int | None) -> int:
        attempts = member.carried_attempt(self._member, self._attempt)
        return attempts if charged is None else min(attempts, charged)

    def is_closed(self) -> bool:
        """Whether the rendezvous is closed (one store read until it is).

        Raises:
            RendezvousConnectionError: the store could not be reached.
            RendezvousStateError: the closed flag holds something that is not ours.
        """
        if not self._closed:
            with self._errors("reading the closed flag"):
                raw = self._store.get(self._keys.closed())
                if raw is not None:
                    decode_closed(raw)  # validate: foreign bytes are an error, not "closed"
                    self._closed = True
                    self._member = evolve(self._member, closed=True)
        return self._closed

    def closed_record(self) -> ClosedRecord | None:
        """The run's closed record (outcome and reason), None while it is open; one store read,
        no round needed.

        Raises:
            RendezvousConnectionError: the store could not be reached.
            RendezvousStateError: the closed flag holds something that is not ours.
        """
        key = self._keys.closed()
        with self._errors("reading the closed flag"):
            raw = self._store.get(key)
        try:
            return None if raw is None else decode_closed(raw)
        except StateCorrupt as error:
            raise RendezvousStateError(f"corrupt rendezvous state at {key!r}: {error}") from None

    def set_closed(self, outcome: str = "succeeded", reason: str = "") -> None:
        """Close the rendezvous for every node: no round completes afterwards.

        Idempotent; the first close's outcome and reason stand.

        Raises:
            RendezvousConnectionError: the store could not be reached.
            RendezvousStateError: the round results are unreadable.
        """
        with self._errors("closing the rendezvous"):
            event = member.CloseRequested(now=self._clock.now(), outcome=outcome, reason=reason)
            self._member, _ = run_member(
                self._store, self._member, event, self.settings.config, self._clock
            )
        self._closed = True

    def num_nodes_waiting(self) -> int:
        """How many nodes have arrived at the round after this node's (0 before the first round).

        Raises:
            RendezvousConnectionError: the store could not be reached.
            RendezvousStateError: the arrival counter holds something else.
        """
        if self._joined is None:
            return 0
        key = self._keys.arrivals(self._joined.result.round_no + 1)
        with self._errors("counting waiting nodes"):
            return decode_counter(self._store.get(key))

    def shutdown(self) -> bool:
        """Leave gracefully (the others form a new round without this node; the rendezvous
        stays open), stop the heartbeat and close the store. Idempotent; never raises.

        Takes at most :data:`SHUTDOWN_BUDGET` seconds (plus the lease's revoke where the store
        has leases), even when the store is gone or paused.

        Returns:
            False when the leave could not be written (the peers then find this node dead
            after the heartbeat timeout instead).
        """
        if self._shut_down is not None:
            return self._shut_down
        ok = True
        # Closing the store ends the calls blocked in it; at the budget that is what we want.
        closer = threading.Timer(SHUTDOWN_BUDGET, self._store.close)
        closer.daemon = True
        closer.start()
        try:
            if self._joined is not None:
                try:
                    with self._errors("leaving"):
                        event = member.LeaveRequested(now=self._clock.now())
                        self._member, _ = run_member(
                            self._store, self._member, event, self.settings.config, self._clock
                        )
                except RendezvousError as error:
                    if getattr(error.__cause__, "loss", None) is None:
                        log.warning("%s", error)
                    else:  # the outage was reported already, in its own line
                        log.info("left without a goodbye: the store is unreachable")
                    ok = False
            if self._keep_alive is not None:
                self._keep_alive.stop(timeout=_KEEP_ALIVE_JOIN)
        finally:
            closer.cancel()
            self._store.close()
            if self.bootstrap_host is not None:
                self.bootstrap_host.stop()
        self._shut_down = ok
        return ok

    def keep_alive_healthy(self) -> bool:
        """The membership core's verdict on this node's keep-alive (``keep_alive_holds``):
        False once peers may soon declare this node dead, so the agent must stop its workers
        (self-fencing) and not start new ones. True before the first join, and always on the
        node that hosts the store (specs/membership.md, M3)."""
        since = self.keep_alive_last_beat()
        if since is None:
            return True
        now, silent = self._clock.now(), self.store_silent_until()
        read = KeepAliveRead(now=now, last_beat=since, silent_until=silent)
        return keep_alive_holds(read, self.member_config())

    def member_config(self) -> MemberConfig:
        """The membership core's config for this node: the heartbeat, whether it hosts the
        store, and the join timeout as the longest a fenced node waits for its keep-alive."""
        config = self.settings.config
        return MemberConfig(
            heartbeat_timeout=config.heartbeat_timeout,
            heartbeat_interval=config.heartbeat_interval,
            hosts_store=self.store_host is not None,
            fence_timeout=config.join_timeout or None,
        )

    def store_silent_until(self) -> float | None:
        """The last instant (on the handler's clock) a look proved the store answered nobody
        until, None if none did since this node's last join: the membership core counts it as
        a landed beat (peers' clocks of this node started again there)."""
        return self._member.store_silent_until

    def keep_alive_last_beat(self) -> float | None:
        """When this node's last heartbeat landed (on the handler's clock; the keep-alive's
        start before the first), None before the first join. The membership core decides from
        it whether the keep-alive lapsed."""
        keep_alive = self._keep_alive
        if keep_alive is None:
            return None
        last = keep_alive.last_success
        return self._keep_alive_started if last is None else last

    # --- a member of a completed round: looks, the next round, in-place attempts --------------

    def watch(self) -> RoundWatch:
        """One look at the round after this node's: closed? opened? how many wait there? And
        was the next in-place attempt of our round opened (``next_attempt``: the opener's
        reason; the attempt is :attr:`attempt` + 1)?

        The same batch reads the ring successor's heartbeat; the member machine
        (:mod:`tpelastic.core.rendezvous.member`) judges it and, when it is dead, reports it,
        which opens the next round (``next_opened`` is then ``"membership"``, or the reason of
        whoever opened it first). Costs one batch of 4-6 reads (one round trip where the store
        reads many keys at once), plus one of two writes for a report.

        Raises:
            RendezvousError: no round completed yet (call :meth:`next_rendezvous` first).
            RendezvousConnectionError, RendezvousStateError: as for :meth:`is_closed`.
        """
        self._require_round("watch")
        with self._errors("watching the next round"):
            event = member.LookRequested(now=self._clock.now(), attempt=self._attempt)
            self._member, looked = run_member(
                self._store, self._member, event, self.settings.config, self._clock
            )
        assert isinstance(looked, member.Looked)
        self._closed = self._closed or self._member.closed
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

    # --- internals ------------------------------------------------------------------------------

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        context = f"run {self.settings.run_id!r}, node {self.node_id!r}: {doing}"
        try:
            with store_errors_as_rendezvous_errors(context):
                yield
        except StateCorrupt as error:
            raise RendezvousStateError(f"{context}: {error}") from None

    def _check_running(self) -> None:
        if self._shut_down is not None:
            raise RendezvousGracefulExitError(
                f"run {self.settings.run_id!r}: node {self.node_id!r} has shut down its handler"
            )

    def _require_round(self, what: str) -> RoundResult:
        self._check_running()
        if self._joined is None:
            raise RendezvousError(f"{what}() needs a completed round: call next_rendezvous() first")
        return self._joined.result

    def _start_keep_alive(self) -> None:
        if self._keep_alive is None:
            self._keep_alive_started = self._clock.now()
            self._keep_alive = KeepAlive(
                self._store,
                self.settings.config,
                run_id=self.settings.run_id,
                node=self.node_id,
                clock=self._clock,
            ).start()

    def _info(
        self, joined: JoinSucceeded, *, attempt: int = 0, timeout: float | None = None
    ) -> DynamicRendezvousInfo:
        result = joined.result
        prefix = self._keys.work_prefix(result.round_no, attempt)
        hosted = None
        if self.bootstrap_host is not None:
            # A node that is no longer rank 0 stops serving its last attempt's workers.
            # The address rank 0 publishes as MASTER_ADDR (no DNS lookup: it cannot hang).
            address = self._local_addr or socket.gethostname()
            hosted = self.bootstrap_host.serve(address) if joined.rank == 0 else None
            if hosted is None:
                self.bootstrap_host.stop()
        # Rank 0 publishes right after its own join; waiting as long as a follower waits for a
        # closer bounds the read without tying the node up for the whole join timeout.
        bootstrap = RendezvousStoreInfo.build(
            joined.rank,
            self._store,
            self._local_addr,
            hosted,
            key=f"{prefix}/master",
            timeout=self.settings.config.takeover_delay if timeout is None else timeout,
            agent_hosted=hosted is not None,
        )
        return DynamicRendezvousInfo(
            self._scoped(prefix),
            joined.rank,
            result.world_size,
            bootstrap,
            tuple(p.node for p in result.participants),
            (),
            round=result.round_no,
            restart_count=attempts.attempt_restart_count(result, attempt),
            attempt=attempt,
        )

    def _scoped(self, prefix: str) -> KeyValueStore:
        if isinstance(self._store, StoreRendezvousBackend):
            return self._store.scoped(prefix)
        return PrefixedStore(self._store, prefix)


__all__ = [
    "SHUTDOWN_BUDGET",
    "DynamicRendezvousHandler",
    "DynamicRendezvousInfo",
    "default_node_id",
]
