"""The TCPStore wire format: tensorplay's, as measured on the wire, plus three requests of ours.

Measured with a logging proxy between tensorplay 1.0's TCPStore client and server (see
docs/stores.md). A request is one opcode byte followed by fields; a field is a little-endian
``uint32`` length and that many bytes. A reply starts with a status byte (0 = ok). The server
keeps a connection open for any number of requests; tensorplay's own client just never reuses
one. An opcode the server does not know makes it close the connection.

==========  ====  ============================  ==============================================
request     code  fields                        reply
==========  ====  ============================  ==============================================
SET         0     key, value                    0
GET         1     key                           0, value  |  1 (absent)
ADD         2     key, amount (int64 LE)        0, new value (ASCII decimal)
HAS         3     key                           0 (present) | 1 (absent)
CAS         4     key, expected, new            0, previous value (``b""`` when absent)
DELETE      5     key                           0 (deleted) | 1 (was absent)
CHECK       6     (ignored), packed keys        0, 0 (all present) | 1
NUM_KEYS    7     -                             0, count (int64 LE)
WAIT        64    packed keys, timeout ms i64   0, 0 (all present) | 1 (timed out)   *ours*
MULTI_GET   65    packed keys                   0, then per key: 1, value | 0         *ours*
WAIT_ANY    66    packed keys, timeout ms i64   0, 0 (one present) | 1 (timed out)    *ours*
CHALLENGE   67    -                             0, nonce (32 bytes; empty: no secret)   *ours*
PROVE       68    HMAC-SHA256(secret, nonce)    0 (then served) | connection closed    *ours*
==========  ====  ============================  ==============================================

"Packed keys" is one field whose bytes are themselves fields, one per key. CAS creates an absent
key only when ``expected`` is ``b""``. WAIT answers once every listed key exists, WAIT_ANY
once any one does (an empty list never does). WAIT, MULTI_GET and WAIT_ANY exist only on our server
(:mod:`tcp_server`); tensorplay's server closes the connection on them, which is how our client
(:mod:`tcp_client`) tells the two apart. A server started with a run secret serves a connection
only after CHALLENGE and a PROVE of :func:`proof`; before that, any other request closes it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

SET, GET, ADD, HAS, CAS, DELETE, CHECK, NUM_KEYS = range(8)
WAIT = 64
MULTI_GET = 65
WAIT_ANY = 66
CHALLENGE = 67
PROVE = 68
OK = 0
MISSING = 1

_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
# The client's bound on one field of a reply: far above any rendezvous value, far below what
# would exhaust memory when a foreign server sends garbage. The server's bounds are in
# :mod:`limits`.
MAX_FIELD = 256 * 1024 * 1024


class WireError(Exception):
    """Bytes that are not a well-formed request or reply."""


def field(data: bytes) -> bytes:
    """One length-prefixed field."""
    return _U32.pack(len(data)) + data


def pack_keys(keys: Sequence[str]) -> bytes:
    """The contents of the packed-keys field of CHECK, WAIT, WAIT_ANY and MULTI_GET."""
    return b"".join(field(key.encode("utf-8")) for key in keys)


def int64(value: int) -> bytes:
    """The contents of an int64 field."""
    return _I64.pack(value)


def request(op: int, *fields: bytes) -> bytes:
    """A whole request: ``op`` and its fields (each given raw, framed here)."""
    return bytes([op]) + b"".join(field(f) for f in fields)


def decode_int64(raw: bytes) -> int:
    """An int64 field's value.

    Raises:
        WireError: not 8 bytes.
    """
    if len(raw) != 8:
        raise WireError(f"expected an 8-byte integer, got {len(raw)} bytes")
    return int(_I64.unpack(raw)[0])


def proof(secret: bytes, nonce: bytes) -> bytes:
    """What PROVE sends for ``nonce``: the secret's HMAC of it (32 bytes)."""
    # Imported with a secret only: hashlib loads OpenSSL, ~3.5 MiB in every agent without one.
    import hashlib
    import hmac

    return hmac.new(secret, b"tpelastic-store-auth\0" + nonce, hashlib.sha256).digest()


def proof_matches(got: bytes, secret: bytes, nonce: bytes) -> bool:
    """Whether ``got`` is :func:`proof` of ``nonce`` (compared in constant time)."""
    import hmac

    return hmac.compare_digest(got, proof(secret, nonce))


def counter_value(stored: bytes | None) -> int:
    """What ADD counts from: the leading decimal digits (with a sign), as tensorplay does."""
    if not stored:
        return 0
    text = stored[:32].decode("ascii", "replace")
    sign = -1 if text.startswith("-") else 1
    digits = ""
    for char in text[1:] if sign < 0 else text:
        if not char.isdigit():
            break
        digits += char
    return sign * int(digits) if digits else 0


__all__ = [
    "ADD",
    "CAS",
    "CHALLENGE",
    "CHECK",
    "DELETE",
    "GET",
    "HAS",
    "MAX_FIELD",
    "MISSING",
    "MULTI_GET",
    "NUM_KEYS",
    "OK",
    "PROVE",
    "SET",
    "WAIT",
    "WAIT_ANY",
    "WireError",
    "counter_value",
    "decode_int64",
    "field",
    "int64",
    "pack_keys",
    "proof",
    "proof_matches",
    "request",
]
