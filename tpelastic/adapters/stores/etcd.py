"""EtcdStore: the KeyValueStore port over an etcd (>= 3.4) cluster, via its v3 HTTP/JSON gateway.

Decisions (see docs/backends.md for the user's side):

* Client: ``etcd3gw`` (the ``tpelastic[etcd]`` extra) gives one HTTP session per endpoint, with
  TLS settings and the gateway's URL layout. We send our own request bodies through that session
  (``/v3/kv/range``, ``/v3/kv/txn``, ``/v3/kv/put``, ``/v3/watch``, ``/v3/auth/authenticate``):
  keys are UTF-8 bytes (the library's helpers encode ``str`` keys as latin-1), every request
  gets a timeout we choose, and a watch must be bounded in time, which the library's watcher
  is not.
* Layout: key ``k`` lives at ``<prefix>/kv/k``; ``<prefix>/op/`` holds our per-thread markers.
* Endpoint rotation: a call goes to the current endpoint; when it is refused, times out, or
  answers 5xx, the call moves on to the next one, round after round, until the store's
  ``timeout``; only then ``StoreUnavailable``.
* Exactly once: a request whose answer was lost may still have been applied (by the member
  before it died, or later by the new leader). So every conditional write (``add``,
  ``set_if_absent``, ``compare_and_set``) is a read of the key and of this thread's marker in
  one snapshot, then one txn that compares the key's ``mod_revision`` (or ``create_revision ==
  0`` for an absent key) and writes the key *and* the marker (the call's sequence number).
  A retry first looks for its own marker: present means the earlier attempt landed. Two
  attempts compare the same revision, so at most one of them can land.
  ``set`` and ``delete`` are plain and simply retried (idempotent; a lost ``set`` that lands
  late can still overwrite a newer value, as with any store).
* ``wait_for``: read which keys are missing (one txn), then watch the range spanning them from
  the read's revision + 1, so nothing between the read and the watch is missed; any PUT of a
  missing key ends the watch and the keys are read again. A watch is bounded by a slice of at
  most ``_WATCH_SLICE`` seconds and is then reopened (this also notices a silently stuck member).
* Leases (``set_leased``, ``revoke_lease``): one lease per store object, granted with a whole
  number of seconds (etcd's unit; at least 1) on first use. Each ``set_leased`` renews it with
  one keep-alive request and writes the key only when it is not yet under the current lease, so
  a steady heartbeat costs one request. A lease found expired is granted anew and its keys
  rewritten (peers may have found us dead meanwhile; they judge by the key alone). ``close``
  revokes it too, so a graceful exit drops its keys at once.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock
from tpelastic.adapters.stores.errors import StoreCorrupt, StoreUnavailable
from tpelastic.adapters.stores.etcd_parts import (
    b64,
    check_arguments,
    gateway_message,
    interrupt,
    parse_endpoints,
    short_reason,
    value_of,
)

try:
    import etcd3gw
    import requests
except ImportError:  # reported when an EtcdStore is made, not on import
    etcd3gw = None  # type: ignore[assignment]

_INSTALL_HINT = "the etcd store needs the etcd3gw package: pip install 'tpelastic[etcd]'"
# A healthy member answers in milliseconds. One that forwarded our write to a leader that just
# died holds it for its own request timeout (measured: 6 s with a 0.5 s election timeout), long
# after a new leader exists, so we give up on an attempt well before and ask the next member.
_ATTEMPT_TIMEOUT = 2.0
_CONNECT_TIMEOUT = 1.0
_WATCH_SLICE = 2.0
# etcd refuses a txn of more than 128 operations by default.
_TXN_CHUNK = 100


class EtcdExtraMissing(ImportError):
    """etcd3gw is not installed; the message names the extra to install."""


# What a conditional write should do, given the key's current value: (value to write, or None
# to answer without writing; the call's answer, JSON-able when a value is written).
_Plan = tuple[bytes | None, Any]


class _Retry(Exception):
    """One attempt at one endpoint failed in a way another member may not."""


class EtcdStore:
    """A KeyValueStore kept in etcd: survives the loss of a minority of the cluster's members.

    Args:
        endpoints: ``(host, port)`` of the members' client URLs, tried in turn.
        prefix: every key lives under it, so runs and tools can share one cluster.
        timeout: seconds one call may take in all, rotating over the members, before it raises
            ``StoreUnavailable``.
        ca_cert, cert, key: TLS: the CA bundle to verify members with, and a client certificate
            and its key (both or neither). Any of them switches the client to https.
        user, password: etcd authentication (both or neither).
        attempt_timeout: seconds one request to one member may take before the call moves on to
            the next member (raise it for members on slow disks).

    Raises:
        EtcdExtraMissing: etcd3gw is not installed.
        ValueError: no endpoints, a bad port, a timeout <= 0, or half of a pair given.
    """

    def __init__(
        self,
        endpoints: Sequence[tuple[str, int]],
        *,
        prefix: str = "/tpelastic",
        timeout: float = 30.0,
        ca_cert: str | None = None,
        cert: str | None = None,
        key: str | None = None,
        user: str | None = None,
        password: str | None = None,
        attempt_timeout: float = _ATTEMPT_TIMEOUT,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._clock = clock
        if etcd3gw is None:
            raise EtcdExtraMissing(_INSTALL_HINT)
        check_arguments(endpoints, min(timeout, attempt_timeout), (cert, key), (user, password))
        tls = any(part is not None for part in (ca_cert, cert, key))
        self._clients = [
            etcd3gw.Etcd3Client(
                host=host,
                port=int(port),
                protocol="https" if tls else "http",
                ca_cert=ca_cert,
                cert_cert=cert,
                cert_key=key,
                api_path="/v3/",  # no discovery round trip; the gateway path of etcd >= 3.4
            )
            for host, port in endpoints
        ]
        self._names = [f"{host}:{port}" for host, port in endpoints]
        self._root = prefix.rstrip("/")
        self._marker_root = f"{self._root}/op/{uuid.uuid4().hex}/"
        self._auth = (user, password) if user is not None else None
        # Given per request: requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE in the environment
        # override a session's own CA file, which would make TLS fail on hosts that set them.
        self._verify: str | bool = ca_cert if ca_cert is not None else True
        self._timeout = float(timeout)
        self._attempt_timeout = float(attempt_timeout)
        self._current = 0
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        self._watches: set[Any] = set()
        self._closed = False
        self._lease: str | None = None  # etcd's lease id, as the gateway spells it (a string)
        self._leased: dict[str, bytes] = {}  # keys written under the current lease
        self._lease_lock = threading.Lock()

    # -- requests -------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailable(f"etcd store {self._root!r} is closed", waited_out=True)

    def _post(self, index: int, path: str, body: dict[str, Any], left: float) -> Any:
        client = self._clients[index]
        timeouts = (min(_CONNECT_TIMEOUT, left), min(self._attempt_timeout, left))
        try:
            response = client.session.post(
                client.get_url(path), json=body, timeout=timeouts, verify=self._verify
            )
        except requests.RequestException as error:
            raise _Retry(short_reason(error)) from None
        if response.status_code == 401 and self._auth is not None and path != "/auth/authenticate":
            self._authenticate(index, left)
            raise _Retry("auth token refreshed")
        if response.status_code >= 500 or response.status_code == 429:
            raise _Retry(gateway_message(response))
        if response.status_code != 200:
            raise StoreUnavailable(
                f"etcd at {self._names[index]} refused {path}: {gateway_message(response)}"
            )
        try:
            return response.json()
        except ValueError:  # a proxy's page, or not an etcd gateway at all
            raise _Retry(f"HTTP 200 without JSON from {path}") from None

    def _authenticate(self, index: int, left: float) -> None:
        assert self._auth is not None
        user, password = self._auth
        # etcd refuses to authenticate a request that carries an expired token.
        self._clients[index].session.headers.pop("Authorization", None)
        reply = self._post(index, "/auth/authenticate", {"name": user, "password": password}, left)
        self._clients[index].session.headers["Authorization"] = reply["token"]

    def _call(self, path: str, body: dict[str, Any]) -> Any:
        """POST to the current member, rotating on failure until the store's timeout."""
        self._check_open()
        deadline = self._clock.now() + self._timeout
        problems: dict[str, str] = {}
        for attempt in itertools.count():
            with self._lock:
                index = self._current
            if attempt and attempt % len(self._clients) == 0:
                # Every member failed once: back off a little (an election takes ~1 s).
                self._clock.sleep(min(0.05 * 2 ** (attempt // len(self._clients)), 0.5))
            left = deadline - self._clock.now()
            if left <= 0:
                break
            try:
                if self._auth is not None and "Authorization" not in self._session(index).headers:
                    self._authenticate(index, left)
                return self._post(index, path, body, left)
            except _Retry as problem:
                problems[self._names[index]] = str(problem)
                self._rotate(index)
            self._check_open()
        seen = "; ".join(f"{name}: {why}" for name, why in problems.items())
        raise StoreUnavailable(f"etcd unreachable within {self._timeout:g} s ({seen})")

    def _session(self, index: int) -> Any:
        return self._clients[index].session

    def _rotate(self, failed: int) -> None:
        with self._lock:
            if self._current == failed:  # another thread may have moved on already
                self._current = (failed + 1) % len(self._clients)

    def _path(self, key: str) -> bytes:
        return f"{self._root}/kv/{key}".encode()

    def _txn(self, compare: list[Any], success: list[Any], failure: list[Any]) -> Any:
        return self._call("/kv/txn", {"compare": compare, "success": success, "failure": failure})

    # -- the port -------------------------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        reply = self._call("/kv/range", {"key": b64(self._path(key))})
        kvs = reply.get("kvs") or [None]
        return value_of(kvs[0])

    def set(self, key: str, value: bytes) -> None:
        self._call("/kv/put", {"key": b64(self._path(key)), "value": b64(bytes(value))})

    def delete(self, key: str) -> None:
        self._call("/kv/deleterange", {"key": b64(self._path(key))})

    def _snapshot(self, key: str, marker: bytes) -> tuple[dict[str, Any] | None, bytes | None]:
        """The key's record and this thread's marker, read at one revision."""
        reads = [{"request_range": {"key": b64(k)}} for k in (self._path(key), marker)]
        replies = self._txn([], reads, [])["responses"]
        kv, mark = ((r["response_range"].get("kvs") or [None])[0] for r in replies)
        return kv, value_of(mark)

    def _write_if_unchanged(
        self, key: str, kv: dict[str, Any] | None, value: bytes, marker: bytes, tag: bytes
    ) -> bool:
        path = b64(self._path(key))
        if kv is None:
            compare = {"key": path, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}
        else:
            revision = kv["mod_revision"]
            compare = {"key": path, "target": "MOD", "result": "EQUAL", "mod_revision": revision}
        puts = [
            {"request_put": {"key": path, "value": b64(value)}},
            {"request_put": {"key": b64(marker), "value": b64(tag)}},
        ]
        return bool(self._txn([compare], puts, []).get("succeeded", False))

    def _conditional(self, key: str, decide: Callable[[bytes | None], _Plan]) -> Any:
        """Run one exactly-once conditional write planned by ``decide(current value)``."""
        marker = f"{self._marker_root}{threading.get_ident()}".encode()
        seq = str(next(self._seq)).encode()
        while True:
            kv, mark = self._snapshot(key, marker)
            if mark is not None and mark.split(b" ", 1)[0] == seq:
                return json.loads(mark.split(b" ", 1)[1])  # an earlier attempt landed
            value, answer = decide(value_of(kv))
            if value is None:
                return answer
            tag = seq + b" " + json.dumps(answer).encode()
            if self._write_if_unchanged(key, kv, value, marker, tag):
                return answer
            # The key changed since the snapshot: plan again on its new value.

    def add(self, key: str, amount: int) -> int:
        def decide(current: bytes | None) -> _Plan:
            try:
                number = int((current or b"0").decode("ascii")) + int(amount)
            except (UnicodeDecodeError, ValueError):
                raise StoreCorrupt(key, "add on a key that is not a counter") from None
            return str(number).encode("ascii"), number

        return int(self._conditional(key, decide))

    def set_if_absent(self, key: str, value: bytes) -> tuple[bool, bytes]:
        value = bytes(value)

        def decide(current: bytes | None) -> _Plan:
            return (None, (False, current)) if current is not None else (value, True)

        outcome = self._conditional(key, decide)
        return (True, value) if outcome is True else outcome

    def compare_and_set(
        self, key: str, expected: bytes | None, value: bytes
    ) -> tuple[bool, bytes | None]:
        value = bytes(value)

        def decide(current: bytes | None) -> _Plan:
            return (None, (False, current)) if current != expected else (value, True)

        outcome = self._conditional(key, decide)
        return (True, value) if outcome is True else outcome

    def set_leased(self, key: str, value: bytes, ttl: float) -> None:
        """Write ``key`` under this store's lease of ``ttl`` seconds (rounded up to whole
        seconds), renewing the lease; the key disappears when the lease is not renewed in time.

        Raises:
            StoreUnavailable: as ``set``.
        """
        seconds = max(1, math.ceil(ttl))
        with self._lease_lock:
            if self._lease is not None and not self._renew(self._lease):
                self._lease, self._leased = None, {}  # expired: its keys are gone already
            if self._lease is None:
                reply = self._call("/lease/grant", {"TTL": str(seconds), "ID": "0"})
                self._lease = str(reply["ID"])
            if self._leased.get(key) != bytes(value):
                body = {"key": b64(self._path(key)), "value": b64(bytes(value))}
                self._call("/kv/put", {**body, "lease": self._lease})
                self._leased[key] = bytes(value)

    def _renew(self, lease: str) -> bool:
        reply = self._call("/lease/keepalive", {"ID": lease})
        return int((reply.get("result") or {}).get("TTL", -1)) > 0

    def revoke_lease(self) -> None:
        """Revoke this store's lease now (its keys disappear). Never raises."""
        with self._lease_lock:
            lease, self._lease, self._leased = self._lease, None, {}
        if lease is None or self._closed:
            return
        try:
            self._post(self._current, "/kv/lease/revoke", {"ID": lease}, self._attempt_timeout)
        except Exception:  # best effort: the lease then simply expires
            pass

    def wait_for(self, keys: Sequence[str], timeout: float) -> bool:
        self._check_open()
        wanted = list(dict.fromkeys(keys))
        deadline = self._clock.now() + max(0.0, timeout) if timeout < math.inf else math.inf
        while True:
            missing, revision = self._missing(wanted)
            if not missing:
                return True
            left = deadline - self._clock.now()
            if left <= 0:
                return False
            self._watch_once(missing, revision, min(left, _WATCH_SLICE))

    def _missing(self, keys: list[str]) -> tuple[list[str], int]:
        """Which keys are absent, and a revision at which none of them had appeared."""
        missing: list[str] = []
        revision: int | None = None
        for start in range(0, len(keys), _TXN_CHUNK):
            chunk = keys[start : start + _TXN_CHUNK]
            reads = [
                {"request_range": {"key": b64(self._path(k)), "count_only": True}} for k in chunk
            ]
            reply = self._txn([], reads, [])
            counts = [int(r["response_range"].get("count", 0)) for r in reply["responses"]]
            missing += [k for k, count in zip(chunk, counts, strict=True) if count == 0]
            read_at = int(reply["header"]["revision"])
            revision = read_at if revision is None else min(revision, read_at)
        return missing, revision or 0

    def _watch_once(self, missing: list[str], revision: int, budget: float) -> None:
        """Block until a missing key is put after ``revision``, or ``budget`` seconds pass."""
        paths = sorted(self._path(k) for k in missing)
        wanted = {b64(p) for p in paths}
        with self._lock:
            index = self._current
        body = {
            "create_request": {
                "key": b64(paths[0]),
                "range_end": b64(paths[-1] + b"\x00"),
                "start_revision": str(revision + 1),
                "filters": ["NODELETE"],
            }
        }
        ends = self._clock.now() + budget
        client = self._clients[index]
        try:
            response = client.session.post(
                client.get_url("/watch"),
                json=body,
                stream=True,
                timeout=(_CONNECT_TIMEOUT, budget),
                verify=self._verify,
            )
        except requests.RequestException:
            self._rotate(index)
            return
        with self._lock:
            self._watches.add(response)
        try:
            for line in response.iter_lines():
                result = json.loads(line).get("result", {}) if line.strip() else {}
                events = result.get("events", [])
                if any(e["kv"]["key"] in wanted for e in events) or result.get("canceled"):
                    return
                if self._clock.now() > ends:
                    return
        except (requests.RequestException, ValueError, AttributeError):
            # Read timeout (nothing happened), a lost member, or close() shut the stream: the
            # caller reads again, which rotates members or reports the store closed.
            return
        finally:
            with self._lock:
                self._watches.discard(response)
            response.close()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            watches = list(self._watches)
        self.revoke_lease()
        try:
            # Best effort, bounded: our markers are useless once we are gone.
            marker = self._marker_root.encode()
            end = marker[:-1] + bytes([marker[-1] + 1])
            body = {"key": b64(marker), "range_end": b64(end)}
            self._post(self._current, "/kv/deleterange", body, 1.0)
        except Exception:
            pass
        self._closed = True
        for response in watches:
            interrupt(response)
        for client in self._clients:
            client.session.close()

    def __repr__(self) -> str:
        return f"EtcdStore({','.join(self._names)}, prefix={self._root!r}, closed={self._closed})"


__all__ = ["EtcdExtraMissing", "EtcdStore", "parse_endpoints"]
