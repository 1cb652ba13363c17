"""How our values sit in a tensorplay-protocol store: empty and escape-prefixed values get a
two-byte escape in front, everything else is stored as is.

tensorplay's compare-and-swap reports an absent key as ``b""``, so a raw ``b""`` could not be told
from "absent". Shared by :mod:`tensorplay_store` and :mod:`tcp_client`, so that both clients read
each other's values on the same server.
"""

from __future__ import annotations

ESCAPE = b"\xff\xfe"
# Never produced by encode: encoded values that start with ESCAPE continue with ESCAPE or end.
PROBE = ESCAPE + b"?tpelastic-probe"


def encode(value: bytes) -> bytes:
    """The stored form of ``value`` (never ``b""``)."""
    value = bytes(value)
    if not value or value.startswith(ESCAPE):
        return ESCAPE + value
    return value


def decode(stored: bytes) -> bytes:
    """The value whose stored form is ``stored``."""
    return stored[len(ESCAPE) :] if stored.startswith(ESCAPE) else stored


def decode_current(stored: bytes) -> bytes | None:
    """A compare-and-swap's report of the value there: ``b""`` means absent (encode never
    stores it)."""
    return None if stored == b"" else decode(stored)


__all__ = ["ESCAPE", "PROBE", "decode", "decode_current", "encode"]
