"""StaticTCPRendezvous: one fixed membership over a TCPStore at a known endpoint.

Ranks are not negotiated: every node is told its rank (config ``rank``, the node rank) and the
world size (min_nodes == max_nodes). The node that hosts the store (rank 0, or whichever has
``is_host=true``) runs the TCPStore server at the endpoint; the others connect to it. Server and
client are ours (:mod:`~tpelastic.adapters.stores.tcp_server`; ``store_type=tcp``, the default),
on tensorplay's wire format, so tensorplay's client can share the store (``use_agent_store``) and
the agent never imports tensorplay; ``store_type=tensorplay`` uses tensorplay's server and
client. A round is one barrier: each node writes its own "joined" key and waits until every
rank's key exists, bounded by the join timeout.

Membership never changes, so calling ``next_rendezvous`` again (an agent restarting its workers)
answers at once with the same ranks, until the rendezvous is closed.

Keys, under ``tpelastic/<run_id>/``: ``static/joined/<rank>``, ``static/master`` (the bootstrap
endpoint record) and the core's keys of the run (``RunKeys``: the closed record, and what the
agent writes of the job's one round: its attempts and their endpoints). They outlive the job
only on a store that does (a standalone ``tpelastic store``): reuse a run id there and the
second job finds the first one's keys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock, KeyValueStore
from tpelastic.adapters.rendezvous.errors import (
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousJoinTimeoutError,
    RendezvousStateError,
    store_errors_as_rendezvous_errors,
)
from tpelastic.adapters.rendezvous.handler import RendezvousHandler
from tpelastic.adapters.rendezvous.info import RendezvousInfo, RendezvousStoreInfo
from tpelastic.adapters.rendezvous.parameters import DEFAULT_PORT, RendezvousParameters
from tpelastic.adapters.stores.errors import StoreCorrupt, StoreUnavailable
from tpelastic.adapters.stores.prefixed import PrefixedStore
from tpelastic.adapters.stores.signed import load_secret, signed
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.records import (
    ClosedRecord,
    StateCorrupt,
    decode_closed,
    encode_closed,
)

if TYPE_CHECKING:
    from tpelastic.adapters.stores.tensorplay_store import TensorplayStore

_JOINED = b"joined"
SERVERS = ("tcp", "tensorplay")


class StaticTCPRendezvous(RendezvousHandler):
    """One-shot rendezvous with fixed membership over a static TCPStore endpoint.

    Args:
        master_addr: host of the store endpoint (the address the host node listens on).
        master_port: port of the store endpoint (1..65535).
        rank: this node's rank, ``0 <= rank < world_size``.
        world_size: the number of nodes.
        run_id: the job's id; its keys live under ``tpelastic/<run_id>/``.
        timeout: the join timeout in seconds: how long to wait for the host and the other nodes.
        is_host: whether this node runs the store server (default: ``rank == 0``).
        read_timeout: how long one store call may take once joined.
        secret: the run secret: every record is signed and checked (the server asks for no
            proof: the workers' tensorplay client, which shares it, cannot give one;
            docs/security.md).
        server: ``tcp`` (our TCPStore server and client) or ``tensorplay`` (tensorplay's).
    """

    def __init__(
        self,
        master_addr: str,
        master_port: int,
        rank: int,
        world_size: int,
        run_id: str,
        timeout: float = 600.0,
        *,
        is_host: bool | None = None,
        read_timeout: float = 60.0,
        secret: bytes | None = None,
        clock: Clock = SYSTEM_CLOCK,
        server: str = "tcp",
    ) -> None:
        if server not in SERVERS:
            raise ValueError(f"static rendezvous: store server must be one of {SERVERS}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"static rendezvous: rank {rank} is outside 0..{world_size - 1}")
        if not 0 < master_port <= 65535:
            raise ValueError(f"static rendezvous: port {master_port} is not in 1..65535")
        self.master_addr = master_addr
        self.master_port = master_port
        self.rank = rank
        self.world_size = world_size
        self.run_id = run_id
        self.timeout = timeout
        self._clock = clock
        self.is_host = rank == 0 if is_host is None else is_host
        self.read_timeout = read_timeout
        self._secret = secret
        self.server = server
        self._base: TensorplayStore | KeyValueStore | None = None
        self._run_store: KeyValueStore | None = None
        self._info: RendezvousInfo | None = None
        self._closed = False
        self._closed_key = RunKeys(run_id).closed()

    def get_backend(self) -> str:
        return "static"

    def get_run_id(self) -> str:
        return self.run_id

    @property
    def use_agent_store(self) -> bool:
        # The bootstrap endpoint is the store endpoint itself, so workers can share it.
        return True

    def next_rendezvous(self) -> RendezvousInfo:
        """Wait until all ``world_size`` nodes have joined; answer with this node's rank.

        Raises:
            RendezvousClosedError: the rendezvous was closed.
            RendezvousJoinTimeoutError: not every node joined within the join timeout.
            RendezvousConnectionError: the store cannot be hosted (port in use) or reached.
            RendezvousStateError: the master address record is unreadable.
        """
        if self._closed:
            raise RendezvousClosedError(f"static rendezvous {self.run_id!r} is closed")
        if self._info is not None:
            if self.is_closed():
                raise RendezvousClosedError(f"static rendezvous {self.run_id!r} is closed")
            return self._info
        deadline = self._clock.deadline(self.timeout)
        store = self._store()
        context = f"static rendezvous {self.run_id!r}, rank {self.rank}"
        # The host may start later than we do: a client made with the join timeout keeps
        # retrying the connection until then (the regular client gives up after read_timeout).
        first = self._client(self.timeout)
        try:
            with store_errors_as_rendezvous_errors(context):
                joining = self._first_contact(self._signed(self._prefixed(first)))
                if self.rank == 0:
                    master = self._publish_master(store)
                self._join_barrier(store, joining, deadline)
                if self.rank != 0:
                    master = self._publish_master(store, self._clock.remaining(deadline))
        finally:
            first.close()
        self._info = RendezvousInfo(store, self.rank, self.world_size, master)
        return self._info

    def _signed(self, store: KeyValueStore) -> KeyValueStore:
        return store if self._secret is None else signed(store, self._secret)

    def _first_contact(self, joining: KeyValueStore) -> KeyValueStore:
        try:
            closed = self._read_closed(joining)
        except StoreUnavailable as error:
            raise RendezvousConnectionError(
                f"static rendezvous {self.run_id!r}: no store server at "
                f"{self.master_addr}:{self.master_port} within {self.timeout:g} s ({error})"
            ) from error
        if closed:
            self._closed = True
            raise RendezvousClosedError(f"static rendezvous {self.run_id!r} is closed")
        return joining

    def _publish_master(self, store: KeyValueStore, timeout: float = 0.0) -> RendezvousStoreInfo:
        return RendezvousStoreInfo.build(
            self.rank,
            store,
            self.master_addr,
            self.master_port,
            key="static/master",
            timeout=timeout,
        )

    def _join_barrier(self, store: KeyValueStore, joining: KeyValueStore, deadline: float) -> None:
        # One key per rank rather than a counter: joining again (a retry after a timeout, a
        # restarted agent) cannot count a node twice.
        joining.set(f"static/joined/{self.rank}", _JOINED)
        everyone = [f"static/joined/{rank}" for rank in range(self.world_size)]
        present = store.wait_for(everyone, self._clock.remaining(deadline))
        for key in everyone if present else ():
            # Not a bare digit: a digit passes as a counter, which the run secret cannot sign.
            if store.get(key) != _JOINED:
                raise RendezvousStateError(
                    f"static rendezvous {self.run_id!r}: corrupt rendezvous state at {key!r}: "
                    "not a joined mark"
                )
        if not present:
            missing = [rank for rank, key in enumerate(everyone) if store.get(key) is None]
            raise RendezvousJoinTimeoutError(
                f"static rendezvous {self.run_id!r}: {self.world_size - len(missing)} of "
                f"{self.world_size} nodes joined within {self.timeout:g} s "
                f"(missing ranks: {', '.join(map(str, missing))})"
            )

    def _store(self) -> KeyValueStore:
        if self._run_store is None:
            try:
                self._base = self._client(self.read_timeout, host=self.is_host)
            except StoreUnavailable as error:
                raise RendezvousConnectionError(
                    f"static rendezvous {self.run_id!r}: cannot host the store: {error}"
                ) from error
            self._run_store = self._signed(self._prefixed(self._base))
        return self._run_store

    def _client(self, timeout: float, *, host: bool = False) -> Any:
        """A store client of the endpoint (hosting its server first when ``host``)."""
        if self.server == "tensorplay":
            # Imported here: tensorplay costs an agent ~0.2 s and ~80 MiB.
            from tpelastic.adapters.stores.tensorplay_store import tcp_store

            return tcp_store(self.master_addr, self.master_port, is_server=host, timeout=timeout)
        from tpelastic.adapters.stores import tcp_client

        # No secret on the server: the workers' tensorplay client shares it (records are
        # signed all the same).
        opener = tcp_client.host if host else tcp_client.connect
        return opener(self.master_addr, self.master_port, timeout=timeout)

    def _prefixed(self, base: Any) -> KeyValueStore:
        if self.server == "tensorplay":
            from tpelastic.adapters.stores.tensorplay_store import prefix_store

            return prefix_store(f"tpelastic/{self.run_id}", base)
        return PrefixedStore(base, f"tpelastic/{self.run_id}")

    def is_closed(self) -> bool:
        """Whether the rendezvous is closed (one store read until it is).

        Raises:
            RendezvousConnectionError: the store could not be reached.
            RendezvousStateError: the closed key holds something that is not a closed record.
        """
        if not self._closed:
            with store_errors_as_rendezvous_errors(f"static rendezvous {self.run_id!r}"):
                self._closed = self._read_closed(self._store())
        return self._closed

    def set_closed(self, outcome: str = "succeeded", reason: str = "") -> None:
        """Close the rendezvous for every node; the first close's outcome and reason stand."""
        record = encode_closed(ClosedRecord(outcome=outcome, reason=reason))
        with store_errors_as_rendezvous_errors(f"static rendezvous {self.run_id!r}"):
            self._store().set_if_absent(self._closed_key, record)
        self._closed = True

    def _read_closed(self, store: KeyValueStore) -> bool:
        try:
            raw = store.get(self._closed_key)
            if raw is None:
                return False
            decode_closed(raw)  # foreign bytes are an error, not "closed"
        except (StateCorrupt, StoreCorrupt) as error:
            raise RendezvousStateError(
                f"static rendezvous {self.run_id!r}: corrupt rendezvous state at "
                f"{self._closed_key!r}: {error}"
            ) from None
        return True

    def num_nodes_waiting(self) -> int:
        return 0  # membership is fixed: no one can be waiting for a later round

    def shutdown(self) -> bool:
        for store in (self._run_store, self._base):
            if store is not None:
                store.close()
        self._run_store = self._base = None
        return True


def create_static_handler(params: RendezvousParameters) -> StaticTCPRendezvous:
    """The ``static`` backend's factory: rank from config ``rank``, world = min = max nodes.

    Raises:
        ValueError: config ``rank`` missing or out of range, min_nodes != max_nodes, or an
            endpoint without a host.
    """
    if params.min_nodes != params.max_nodes:
        raise ValueError(
            "static rendezvous needs a fixed world (min_nodes == max_nodes), "
            f"got {params.min_nodes}:{params.max_nodes}"
        )
    rank = params.get_as_int("rank")
    if rank is None:
        raise ValueError("static rendezvous needs config key 'rank' (this node's rank)")
    host, port = params.host_port(DEFAULT_PORT)
    if not host:
        raise ValueError("static rendezvous needs an endpoint 'host[:port]'")
    assert port is not None
    return StaticTCPRendezvous(
        host,
        port,
        rank,
        params.max_nodes,
        params.run_id,
        params.timeout.join.total_seconds(),
        is_host=params.is_host,
        read_timeout=params.read_timeout,
        secret=load_secret(params.get("secret_file")),
        server="tensorplay" if params.store_type == "tensorplay" else "tcp",
    )


__all__ = ["StaticTCPRendezvous", "create_static_handler"]
