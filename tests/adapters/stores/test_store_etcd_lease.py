"""EtcdStore leases on one real etcd member: a leased key lives while it is renewed, disappears
when the lease lapses or is revoked, and comes back under a new lease after a lapse."""

from __future__ import annotations

import itertools
import time

from etcd_fixtures import EtcdCluster

from tpelastic.adapters.rendezvous.backends import supports_leases
from tpelastic.adapters.stores.etcd import EtcdStore

_prefixes = itertools.count()


def _pair(etcd: EtcdCluster) -> tuple[EtcdStore, EtcdStore]:
    """Two clients of the same keys: the lease's owner and an observer."""
    prefix = f"/lease-test/{next(_prefixes)}"
    return tuple(EtcdStore(etcd.endpoints, prefix=prefix, timeout=5.0) for _ in range(2))  # type: ignore[return-value]


def _gone_within(store: EtcdStore, key: str, seconds: float) -> float:
    """Seconds until ``key`` is absent; fails after ``seconds``."""
    started = time.monotonic()
    while store.get(key) is not None:
        assert time.monotonic() - started < seconds, f"{key} still there after {seconds} s"
        time.sleep(0.1)
    return time.monotonic() - started


def test_a_leased_key_lives_while_renewed_and_expires_after_its_ttl(etcd: EtcdCluster) -> None:
    owner, observer = _pair(etcd)
    try:
        assert supports_leases(owner)
        owner.set_leased("hb/a", b"alive", ttl=1.0)
        for _ in range(6):  # 1.8 s of renewals: longer than the TTL
            time.sleep(0.3)
            owner.set_leased("hb/a", b"alive", ttl=1.0)
            assert observer.get("hb/a") == b"alive"
        # The owner goes silent (as a SIGKILLed node does): the key goes with its lease.
        waited = _gone_within(observer, "hb/a", 10.0)
        assert waited >= 0.3  # not deleted at once: it lived out its lease
        # A renewal after the lapse grants a new lease and writes the key again.
        owner.set_leased("hb/a", b"alive", ttl=1.0)
        assert observer.get("hb/a") == b"alive"
    finally:
        owner.close()
        observer.close()


def test_revoking_or_closing_drops_leased_keys_at_once(etcd: EtcdCluster) -> None:
    owner, observer = _pair(etcd)
    try:
        owner.set_leased("hb/b", b"alive", ttl=30.0)
        owner.set("plain", b"stays")
        owner.revoke_lease()
        assert observer.get("hb/b") is None
        assert observer.get("plain") == b"stays"
        owner.revoke_lease()  # twice is fine
        owner.set_leased("hb/b", b"alive", ttl=30.0)
        owner.close()  # a graceful exit revokes too
        assert observer.get("hb/b") is None
    finally:
        owner.close()
        observer.close()
