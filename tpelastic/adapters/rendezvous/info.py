"""What a finished rendezvous hands an agent: RendezvousInfo and RendezvousStoreInfo.

Both may be built positionally, in the reference API's argument order, because code written for
torchrun-style handlers constructs them that way.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterable
from typing import Any

from attrs import field, frozen

from tpelastic.adapters.ports import KeyValueStore
from tpelastic.adapters.rendezvous.errors import (
    RendezvousStateError,
    RendezvousTimeoutError,
    store_errors_as_rendezvous_errors,
)
from tpelastic.core.values import value_eq, value_hash, value_repr

STORE_INFO_SCHEMA = 1
_MAX_INFO_BYTES = 4096  # an address and a port; anything longer is not ours


def _port_in_range(_instance: object, _attribute: object, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= 65535:
        raise ValueError(f"master_port must be an integer in 1..65535, got {value!r}")


def _non_empty(_instance: object, _attribute: object, value: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"master_addr must be a non-empty string, got {value!r}")


@frozen
class RendezvousStoreInfo:
    """Where the workers' bootstrap store (MASTER_ADDR / MASTER_PORT) lives, and whether rank 0's
    agent hosts it there (``agent_hosted``: every worker then connects as a client) or rank 0's
    worker does."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    MASTER_ADDR_KEY = "MASTER_ADDR"
    MASTER_PORT_KEY = "MASTER_PORT"

    master_addr: str = field(validator=_non_empty)
    master_port: int = field(validator=_port_in_range)
    agent_hosted: bool = field(default=False, kw_only=True)

    @property
    def addr(self) -> str:
        """Alias of ``master_addr``."""
        return self.master_addr

    @classmethod
    def build(
        cls,
        rank: int,
        store: KeyValueStore,
        local_addr: str | None = None,
        server_port: int | None = None,
        *,
        key: str = MASTER_ADDR_KEY,
        timeout: float = 60.0,
        agent_hosted: bool = False,
    ) -> RendezvousStoreInfo:
        """Agree on the bootstrap endpoint: rank 0 decides and publishes, the others read.

        Rank 0 uses ``local_addr`` (else this host's name) and ``server_port`` (else a port free
        right now) and writes them as one record under ``key`` (default ``MASTER_ADDR``, in a
        store the caller scopes to the round, as torch does); pass a key inside the round's
        namespace so no later round reads this one's answer. Other ranks wait up to ``timeout``
        seconds for it. ``agent_hosted`` (rank 0's answer, published with the endpoint) says
        that rank 0's agent hosts a server at ``server_port``.

        Raises:
            RendezvousTimeoutError: rank 0 published nothing within ``timeout``.
            RendezvousStateError: ``key`` holds something that is not a valid endpoint record
                (foreign bytes, or a newer schema than this tpelastic reads).
            RendezvousConnectionError: the store could not be reached.
        """
        with store_errors_as_rendezvous_errors(f"bootstrap store info for rank {rank}"):
            if rank == 0:
                addr = local_addr or socket.gethostname()  # no DNS lookup: it cannot hang
                port = server_port if server_port else _free_port()
                info = cls(addr, port, agent_hosted=agent_hosted and bool(server_port))
                store.set(key, info.encode())
                return info
            if not store.wait_for([key], timeout):
                raise RendezvousTimeoutError(
                    f"rank {rank}: rank 0 did not publish the master address under {key!r} "
                    f"within {timeout:g} s"
                )
            blob = store.get(key)
        if blob is None:  # deleted between the wait and the read: the round is being torn down
            raise RendezvousStateError(f"master address under {key!r} vanished while reading it")
        return cls.decode(key, blob)

    def encode(self) -> bytes:
        """The versioned JSON record rank 0 publishes."""
        record: dict[str, Any] = {
            "schema": STORE_INFO_SCHEMA,
            "addr": self.master_addr,
            "port": self.master_port,
        }
        if self.agent_hosted:  # absent otherwise, so such records read as before
            record["agent"] = True
        return json.dumps(record, sort_keys=True).encode("utf-8")

    @classmethod
    def decode(cls, key: str, blob: bytes) -> RendezvousStoreInfo:
        """Validate and read a record written by :meth:`encode`. Never evaluates anything.

        Raises:
            RendezvousStateError: not our record, or a newer schema.
        """
        try:
            if len(blob) > _MAX_INFO_BYTES:
                raise ValueError(f"{len(blob)} bytes is too long")
            record = json.loads(blob.decode("utf-8"))
            if not isinstance(record, dict) or not isinstance(record.get("schema"), int):
                raise ValueError("not a tpelastic endpoint record")
            if record["schema"] > STORE_INFO_SCHEMA:
                raise ValueError(
                    f"written by a newer tpelastic (schema {record['schema']} > "
                    f"{STORE_INFO_SCHEMA}); upgrade this node"
                )
            addr: Any = record.get("addr")
            port: Any = record.get("port")
            return cls(addr, port, agent_hosted=record.get("agent") is True)
        except (UnicodeDecodeError, ValueError, TypeError) as error:
            raise RendezvousStateError(f"master address under {key!r}: {error}") from None


def _free_port() -> int:
    # Bind to every interface so the port is free wherever workers listen; the OS picks it.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def _as_tuple(items: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(items)


@frozen
class RendezvousInfo:
    """The outcome of a successful rendezvous for one agent.

    Attributes:
        store: the round's store, a KeyValueStore scoped to the run (for tensorplay stores its
            ``raw`` attribute is the tensorplay ``Store``).
        rank: this agent's rank, ``0 <= rank < world_size``.
        world_size: how many agents are in the round.
        bootstrap_store_info: where the workers' bootstrap store lives (None if the backend
            leaves that to the agent).
        participants: the round's nodes, in rank order.
        wait_list: nodes waiting for a later round.
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    store: Any
    rank: int
    world_size: int
    bootstrap_store_info: RendezvousStoreInfo | None = None
    participants: tuple[Any, ...] = field(default=(), converter=_as_tuple)
    wait_list: tuple[Any, ...] = field(default=(), converter=_as_tuple)

    def __attrs_post_init__(self) -> None:
        if self.world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is outside 0..{self.world_size - 1}")
        if self.participants and len(self.participants) != self.world_size:
            raise ValueError(
                f"{len(self.participants)} participants for world_size {self.world_size}"
            )


__all__ = ["STORE_INFO_SCHEMA", "RendezvousInfo", "RendezvousStoreInfo"]
