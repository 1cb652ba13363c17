"""SignedStore: records that only holders of the job's secret can write.

With a run secret (``--rdzv-conf secret_file=PATH`` or ``TPELASTIC_RDZV_SECRET``), every value
the agents store carries an HMAC-SHA256 tag over its key and its bytes, and every value read
must carry a valid one: a record written without the secret, altered, or copied from another key
is a :class:`StoreCorrupt` error (the rendezvous reports it as corrupt state), never obeyed.
Counters (``add``) cannot carry a tag, as the store computes them: a value that is a plain
decimal integer is read as it is. On our TCPStore server the secret is also required of every
connection before it is served (:mod:`tcp_server`), which covers counters too. docs/security.md
has the threat model.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from tpelastic.adapters.ports import KeyValueStore
from tpelastic.adapters.stores.errors import StoreCorrupt

SECRET_ENV = "TPELASTIC_RDZV_SECRET"
MIN_SECRET_BYTES = 16
_MARK = b"\n#hmac-sha256="
_TAG_HEX = 64
_COUNTER = re.compile(rb"-?[0-9]{1,20}")


def load_secret(secret_file: str | None, environ: Mapping[str, str] = os.environ) -> bytes | None:
    """The run secret: the contents of ``secret_file`` (trailing newlines dropped), else
    ``$TPELASTIC_RDZV_SECRET``, else None (no secret: records are not signed).

    Raises:
        ValueError: the file cannot be read, or the secret is shorter than 16 bytes; one line.
    """
    if secret_file:
        try:
            with open(secret_file, "rb") as handle:
                secret = handle.read().rstrip(b"\r\n")
        except OSError as error:
            raise ValueError(
                f"secret_file={secret_file}: cannot read it: {error.strerror or error}"
            ) from None
        where = f"secret_file={secret_file}"
    elif environ.get(SECRET_ENV):
        secret = environ[SECRET_ENV].encode("utf-8")
        where = f"${SECRET_ENV}"
    else:
        return None
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(
            f"{where}: the run secret has {len(secret)} bytes, at least {MIN_SECRET_BYTES} "
            "are needed (e.g. `head -c 32 /dev/urandom | base64 > FILE`)"
        )
    return secret


def tag(secret: bytes, key: str, value: bytes) -> bytes:
    """The hex HMAC-SHA256 of ``value`` under ``key``: a record is bound to where it is."""
    # Imported with a secret only: hashlib loads OpenSSL, ~3.5 MiB in every agent without one.
    import hashlib
    import hmac

    mac = hmac.new(secret, b"tpelastic-record\0" + key.encode("utf-8") + b"\0", hashlib.sha256)
    mac.update(value)
    return mac.hexdigest().encode("ascii")


def sign(secret: bytes, key: str, value: bytes) -> bytes:
    return value + _MARK + tag(secret, key, value)


def verify(secret: bytes, key: str, stored: bytes) -> bytes:
    """The value inside ``stored``; a counter as it is.

    Raises:
        StoreCorrupt: no tag, or one that does not match (names the key).
    """
    if _COUNTER.fullmatch(stored):
        return stored
    value, mark, got = stored.rpartition(_MARK)
    if not mark or len(got) != _TAG_HEX:
        raise StoreCorrupt(key, "not signed with the run secret")
    import hmac

    if not hmac.compare_digest(got, tag(secret, key, value)):
        raise StoreCorrupt(key, "fails the run secret's check (forged, altered or moved)")
    return value


class SignedStore:
    """Sign every value written to ``inner``, check every value read (see the module doc).

    Passes ``multi_get`` and ``wait_any`` through when ``inner`` has them.
    """

    def __init__(self, inner: KeyValueStore, secret: bytes) -> None:
        self._inner = inner
        self._secret = secret

    @property
    def inner(self) -> KeyValueStore:
        return self._inner

    def __getattr__(self, name: str) -> object:
        # Anything else the inner store offers (its port, its server, where) reads through.
        if name in ("multi_get", "wait_any"):
            raise AttributeError(name)  # defined below only when inner has them
        return getattr(self._inner, name)

    def _read(self, key: str, stored: bytes | None) -> bytes | None:
        return None if stored is None else verify(self._secret, key, stored)

    def get(self, key: str) -> bytes | None:
        return self._read(key, self._inner.get(key))

    def set(self, key: str, value: bytes) -> None:
        self._inner.set(key, sign(self._secret, key, value))

    def add(self, key: str, amount: int) -> int:
        return self._inner.add(key, amount)

    def set_if_absent(self, key: str, value: bytes) -> tuple[bool, bytes]:
        swapped, current = self._inner.set_if_absent(key, sign(self._secret, key, value))
        return swapped, verify(self._secret, key, current)

    def compare_and_set(
        self, key: str, expected: bytes | None, value: bytes
    ) -> tuple[bool, bytes | None]:
        want = None if expected is None else sign(self._secret, key, expected)
        swapped, current = self._inner.compare_and_set(key, want, sign(self._secret, key, value))
        return swapped, self._read(key, current)

    def wait_for(self, keys: Sequence[str], timeout: float) -> bool:
        return self._inner.wait_for(keys, timeout)

    def delete(self, key: str) -> None:
        self._inner.delete(key)

    def close(self) -> None:
        self._inner.close()

    def __repr__(self) -> str:
        return f"SignedStore({self._inner!r})"


class _SignedMultiGet(SignedStore):
    def multi_get(self, keys: Sequence[str]) -> list[bytes | None]:
        values = self._inner.multi_get(keys)  # type: ignore[attr-defined]
        return [self._read(key, value) for key, value in zip(keys, values, strict=True)]


class _SignedWaitAny(SignedStore):
    def wait_any(self, keys: Sequence[str], timeout: float) -> bool:
        return bool(self._inner.wait_any(keys, timeout))  # type: ignore[attr-defined]


class _SignedBoth(_SignedMultiGet, _SignedWaitAny):
    pass


def signed(inner: KeyValueStore, secret: bytes) -> SignedStore:
    """``inner`` signed with ``secret``, offering the same optional capabilities as ``inner``."""
    kind = {
        (False, False): SignedStore,
        (True, False): _SignedMultiGet,
        (False, True): _SignedWaitAny,
        (True, True): _SignedBoth,
    }[(hasattr(inner, "multi_get"), hasattr(inner, "wait_any"))]
    return kind(inner, secret)


__all__ = ["MIN_SECRET_BYTES", "SECRET_ENV", "SignedStore", "load_secret", "signed", "verify"]
