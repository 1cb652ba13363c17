"""EtcdStore against one real etcd member on 127.0.0.1: the conformance suite, atomicity across
clients, bad input, a missing extra, and a store that goes away.

Every factory call gets a fresh key prefix on the module's shared etcd, so stores start empty.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from etcd_fixtures import ETCD, OPENSSL, SKIP_REASON, EtcdCluster, etcd_cluster, free_ports
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from tpelastic.adapters.ports import KeyValueStore
from tpelastic.adapters.stores.errors import StoreUnavailable
from tpelastic.adapters.stores.etcd import EtcdStore, _Retry, parse_endpoints
from tpelastic.testing import store_contract as contract

needs_etcd = pytest.mark.skipif(ETCD is None, reason=SKIP_REASON)
_prefixes = itertools.count()


def _factory(cluster: EtcdCluster, timeout: float = 5.0) -> Callable[[], KeyValueStore]:
    def make() -> KeyValueStore:
        return EtcdStore(cluster.endpoints, prefix=f"/test/{next(_prefixes)}", timeout=timeout)

    return make


@needs_etcd
@pytest.mark.parametrize("check", contract.ALL_CHECKS, ids=lambda c: c.__name__)
def test_contract_clause(check: Callable[..., None], etcd: EtcdCluster) -> None:
    check(_factory(etcd))


@needs_etcd
def test_random_operations_agree_with_memory_model(etcd: EtcdCluster) -> None:
    # Capped: each step is one or two HTTP round trips with an fsync behind every write.
    chosen = settings(
        settings.default,
        max_examples=min(settings.default.max_examples, 30),
        stateful_step_count=min(settings.default.stateful_step_count, 25),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    run_state_machine_as_test(contract.store_comparison_machine(_factory(etcd)), settings=chosen)


@needs_etcd
def test_concurrent_adds_from_many_clients_are_exact(etcd: EtcdCluster) -> None:
    prefix = f"/test/{next(_prefixes)}"
    stores = [EtcdStore(etcd.endpoints, prefix=prefix, timeout=10) for _ in range(3)]
    results: list[int] = []
    created: list[bool] = []

    def work(store: EtcdStore, node: int) -> None:
        for _ in range(15):
            results.append(store.add("counter", 1))
        created.append(store.set_if_absent("first", str(node).encode())[0])

    threads = [
        threading.Thread(target=work, args=(stores[n % 3], n), daemon=True) for n in range(6)
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        # Every add returned a distinct count, with no gap and no double: atomic across clients
        # and across threads sharing one client.
        assert sorted(results) == list(range(1, 91))
        assert stores[0].get("counter") == b"90"
        assert created.count(True) == 1
    finally:
        for store in stores:
            store.close()


@needs_etcd
def test_keys_live_under_the_prefix_and_prefixes_are_isolated(etcd: EtcdCluster) -> None:
    one = EtcdStore(etcd.endpoints, prefix="/iso/a", timeout=5)
    two = EtcdStore(etcd.endpoints, prefix="/iso/a2/", timeout=5)
    try:
        one.set("k", b"1")
        assert two.get("k") is None
        assert not two.wait_for(["k"], 0.2)
        two.set("k", b"2")
        assert one.get("k") == b"1"
    finally:
        one.close()
        two.close()


@needs_etcd
def test_wait_for_many_keys_wakes_when_the_last_appears(etcd: EtcdCluster) -> None:
    store = _factory(etcd)()
    keys = [f"r/slot/{i}" for i in range(150)]  # more than one txn's worth of reads
    try:
        for key in keys[:-1]:
            store.set(key, b"")
        timer = threading.Timer(0.3, lambda: store.set(keys[-1], b"x"))
        timer.start()
        started = time.monotonic()
        assert store.wait_for(keys, 10.0)
        # Woken by the watch, well before the 2 s watch slice would end.
        assert 0.25 < time.monotonic() - started < 1.0
        timer.join()
    finally:
        store.close()


def test_endpoints_parse_and_bad_ones_are_named() -> None:
    assert parse_endpoints("a:1, http://b:2379/,[::1]:3") == [("a", 1), ("b", 2379), ("::1", 3)]
    for bad in ("a", "a:", ":5", "a:x", "a:70000", "a:1,,b:2"):
        with pytest.raises(ValueError, match="not host:port"):
            parse_endpoints(bad)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"endpoints": []}, "at least one endpoint"),
        ({"endpoints": [("h", 0)]}, "not a host and a port"),
        ({"timeout": 0}, "timeouts must be > 0"),
        ({"attempt_timeout": -1.0}, "timeouts must be > 0"),
        ({"cert": "c.pem"}, "both cert and key"),
        ({"user": "root"}, "both user and password"),
    ],
)
def test_bad_arguments_are_one_clear_error(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"endpoints": [("127.0.0.1", 2379)], **kwargs}
    with pytest.raises(ValueError, match=message):
        EtcdStore(**arguments)  # type: ignore[arg-type]


def test_missing_extra_names_the_install_command() -> None:
    # A real interpreter in which etcd3gw cannot be imported (None in sys.modules blocks it).
    code = (
        "import sys; sys.modules['etcd3gw'] = None\n"
        "from tpelastic.adapters.stores.etcd import EtcdStore\n"
        "EtcdStore([('127.0.0.1', 2379)])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("tpelastic.adapters.stores.etcd.EtcdExtraMissing:")
    assert "pip install 'tpelastic[etcd]'" in last


def test_nothing_listening_is_store_unavailable_within_the_timeout() -> None:
    ports = free_ports(2)  # nothing listens there
    store = EtcdStore([("127.0.0.1", port) for port in ports], timeout=1.0)
    try:
        for name, call in (("get", lambda: store.get("k")), ("add", lambda: store.add("n", 1))):
            started = time.monotonic()
            with pytest.raises(StoreUnavailable, match=r"etcd unreachable within 1 s \(127"):
                call()
            assert time.monotonic() - started < 2.0, name
    finally:
        store.close()


@needs_etcd
def test_a_waiter_sees_store_unavailable_when_etcd_dies() -> None:
    with etcd_cluster(1) as cluster:
        store = EtcdStore(cluster.endpoints, timeout=1.5)
        outcome: dict[str, object] = {}

        def waiter() -> None:
            started = time.monotonic()
            try:
                outcome["found"] = store.wait_for(["never"], 30.0)
            except StoreUnavailable as error:
                outcome["error"] = error
            outcome["spent"] = time.monotonic() - started

        thread = threading.Thread(target=waiter, daemon=True)
        thread.start()
        time.sleep(0.3)
        cluster.kill(0)
        thread.join(10)
        store.close()
    assert isinstance(outcome.get("error"), StoreUnavailable), outcome
    assert isinstance(outcome["spent"], float) and outcome["spent"] < 5.0


@needs_etcd
def test_close_wakes_a_waiter_promptly(etcd: EtcdCluster) -> None:
    store = _factory(etcd)()
    outcome: dict[str, object] = {}

    def waiter() -> None:
        try:
            outcome["found"] = store.wait_for(["never"], 30.0)
        except StoreUnavailable as error:
            outcome["error"] = error

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    time.sleep(0.3)
    started = time.monotonic()
    store.close()
    thread.join(5)
    assert isinstance(outcome.get("error"), StoreUnavailable), outcome
    assert time.monotonic() - started < 1.5


def _enable_auth(cluster: EtcdCluster, password: str) -> None:
    for path, body in (
        ("/v3/auth/user/add", {"name": "root", "password": password}),
        ("/v3/auth/role/add", {"name": "root"}),
        ("/v3/auth/user/grant", {"user": "root", "role": "root"}),
        ("/v3/auth/enable", {}),
    ):
        cluster._get_json(0, path, body)


@needs_etcd
def test_user_and_password_authenticate_and_bad_ones_are_one_clear_error() -> None:
    # Tokens live 1 s here, so the store must also renew an expired one.
    with etcd_cluster(1, extra=["--auth-token-ttl=1"]) as cluster:
        _enable_auth(cluster, "s3cret")
        factory = lambda: EtcdStore(  # noqa: E731
            cluster.endpoints,
            prefix=f"/test/{next(_prefixes)}",
            user="root",
            password="s3cret",
            timeout=5,
        )
        contract.check_add_counts(factory)
        contract.check_wait_for_wakes(factory)
        store = factory()
        try:
            store.set("k", b"1")
            time.sleep(2.5)  # the token expires (etcd checks expiry about once a second)
            assert store.add("n", 3) == 3
            assert store.wait_for(["k", "n"], 1.0)
        finally:
            store.close()
        for kwargs, problem in (
            ({}, "user name is empty"),
            ({"user": "root", "password": "wrong"}, "authentication failed"),
        ):
            store = EtcdStore(cluster.endpoints, timeout=3, **kwargs)  # type: ignore[arg-type]
            try:
                with pytest.raises(StoreUnavailable, match=f"refused .*{problem}"):
                    store.get("k")
            finally:
                store.close()


@needs_etcd
@pytest.mark.skipif(OPENSSL is None, reason="the openssl command is not installed")
def test_tls_with_a_client_certificate() -> None:
    with etcd_cluster(1, tls=True) as cluster:
        assert cluster.tls is not None
        files = cluster.tls
        factory = lambda: EtcdStore(  # noqa: E731
            cluster.endpoints, ca_cert=files["ca"], cert=files["cert"], key=files["key"]
        )
        contract.check_compare_and_set(factory)
        contract.check_wait_for_wakes(factory)
        # Without a client certificate the member refuses the handshake: unavailable, bounded.
        plain = EtcdStore(cluster.endpoints, ca_cert=files["ca"], timeout=1.0)
        try:
            with pytest.raises(StoreUnavailable, match="unreachable within 1 s"):
                plain.get("k")
        finally:
            plain.close()


class _LosesAnswers(EtcdStore):
    """An EtcdStore whose next conditional write reaches etcd and lands, but whose answer is
    lost on the way back, as when the member dies right after committing. The fault is
    injected at our own request boundary because a real member cannot be killed at exactly
    that instant; etcd itself is real."""

    lose_next_write = False

    def _post(self, index: int, path: str, body: dict[str, Any], left: float) -> Any:
        reply = super()._post(index, path, body, left)
        if self.lose_next_write and path == "/kv/txn" and body["compare"]:
            self.lose_next_write = False
            raise _Retry("answer lost after commit")
        return reply


@needs_etcd
def test_a_conditional_write_whose_answer_is_lost_is_applied_exactly_once(
    etcd: EtcdCluster,
) -> None:
    store = _LosesAnswers(etcd.endpoints, prefix=f"/test/{next(_prefixes)}", timeout=5)
    try:
        for call, expected in (
            (lambda: store.add("n", 5), 5),
            (lambda: store.add("n", 2), 7),
            (lambda: store.set_if_absent("s", b"mine"), (True, b"mine")),
            (lambda: store.compare_and_set("s", b"mine", b"next"), (True, b"next")),
            (lambda: store.compare_and_set("new", None, b""), (True, b"")),
        ):
            store.lose_next_write = True
            assert call() == expected
            assert not store.lose_next_write  # the fault did fire
        assert store.get("n") == b"7"
        assert store.get("s") == b"next"
    finally:
        store.close()


def test_tpelastic_run_without_the_etcd_extra_is_one_line(etcd: EtcdCluster) -> None:
    """A reachable etcd, but etcd3gw not installed: one usage line, exit 2, no traceback."""
    host, port = etcd.endpoints[0]
    code = (
        "import sys; sys.modules['etcd3gw'] = None\n"
        "from tpelastic.cli import run\n"
        f"sys.exit(run.main(['--rdzv-backend', 'etcd', '--rdzv-endpoint', '{host}:{port}',"
        f" '--rdzv-conf', 'join_timeout=5', {__file__!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'tpelastic[etcd]'" in lines[0], lines
