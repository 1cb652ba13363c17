"""What our TCPStore server accepts from one client, and from all of them together.

Every bound here exists because a client that reaches the port (or a buggy one) could otherwise
grow the server's memory without end or stop it serving others. A request that breaks one is
answered by closing its connection (as tensorplay's server does for a request it cannot parse),
except a wait's timeout, which is clamped. docs/stores.md lists them with their reasons.
"""

from __future__ import annotations

from attrs import frozen

_KIB = 1024
_MIB = 1024 * 1024


@frozen(kw_only=True)
class ServerLimits:
    """The server's bounds. The defaults hold a job of many thousands of nodes (a round's result
    is about 150 bytes per node) and keep the server near 100 MB whatever clients send."""

    # One key, one value (SET, CAS, stored or compared), one packed list of keys and its count.
    max_key_bytes: int = 16 * _KIB
    max_value_bytes: int = 16 * _MIB
    max_keys_field_bytes: int = 4 * _MIB
    max_keys_per_request: int = 65_536
    # The longest wait a WAIT or WAIT_ANY may ask for; longer ones are clamped (our client asks
    # for at most an hour at a time).
    max_wait_ms: int = 24 * 3600 * 1000
    # Bytes of requests a connection may send behind one it cannot answer yet (a parked wait,
    # or replies it does not read): more and the connection is closed.
    max_pipelined_bytes: int = 1 * _MIB
    # Replies a connection does not read: past this, its later requests wait unread (the
    # client then blocks in its own send) until it reads.
    max_unread_reply_bytes: int = 1 * _MIB
    # One reply (a MULTI_GET of many keys): a larger one closes the connection.
    max_reply_bytes: int = 32 * _MIB
    # Bytes buffered for all connections together (requests being received, replies not yet
    # read): past it, the connection holding the most is closed.
    max_buffered_bytes: int = 32 * _MIB
    # Keys waited on by all parked waits together.
    max_parked_keys: int = 262_144
    max_connections_per_peer: int = 4096

    @property
    def max_request_bytes(self) -> int:
        """The largest well-formed request (a CAS of a key and two values)."""
        return 1 + 12 + self.max_key_bytes + 2 * self.max_value_bytes


DEFAULT_LIMITS = ServerLimits()

__all__ = ["DEFAULT_LIMITS", "ServerLimits"]
