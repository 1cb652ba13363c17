"""DynamicRendezvousHandler in one process: handlers on threads over real TCPStore clients (and a
MemoryStore for the cases that only need a store), the factory, settings and error paths."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tpelastic.adapters.stores import MemoryStore, StoreUnavailable, TensorplayStore, tcp_store
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.rendezvous import (
    DynamicRendezvousHandler,
    DynamicRendezvousInfo,
    P10dRendezvousBackend,
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousError,
    RendezvousGracefulExitError,
    RendezvousJoinTimeoutError,
    RendezvousParameters,
    RendezvousSettings,
    RendezvousStateError,
    TpRendezvousBackend,
    create_handler,
)

FAST = {
    "join_timeout": 10.0,
    "last_call_timeout": 0.3,
    "heartbeat_interval": 0.2,
    "heartbeat_timeout": 0.8,
}


def _config(min_nodes: int, max_nodes: int, **overrides: float) -> RendezvousConfig:
    return RendezvousConfig(min_nodes=min_nodes, max_nodes=max_nodes, **{**FAST, **overrides})


@pytest.fixture
def server() -> Iterator[TensorplayStore]:
    store = tcp_store("127.0.0.1", 0, is_server=True, timeout=5.0)
    yield store
    store.close()


def _client(server: TensorplayStore) -> P10dRendezvousBackend:
    return P10dRendezvousBackend(
        tcp_store("127.0.0.1", server.raw.port, is_server=False, timeout=5.0)
    )


def _handlers(
    server: TensorplayStore, run_id: str, n: int, config: RendezvousConfig
) -> list[DynamicRendezvousHandler]:
    return [
        DynamicRendezvousHandler(
            run_id,
            _client(server),
            config,
            backend_name="tcp",
            node_id=f"n{i}",
            local_addr="127.0.0.1",
        )
        for i in range(n)
    ]


def _all(calls: list[Callable[[], Any]], timeout: float = 20.0) -> list[Any]:
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
        return [f.result(timeout=timeout) for f in futures]


def _join_all(handlers: list[DynamicRendezvousHandler], **kw: Any) -> list[DynamicRendezvousInfo]:
    return _all([functools.partial(h.next_rendezvous, **kw) for h in handlers])


def _shutdown(handlers: list[DynamicRendezvousHandler]) -> None:
    for handler in handlers:
        handler.shutdown()


def test_three_handlers_agree_on_ranks_round_and_bootstrap(server: TensorplayStore) -> None:
    handlers = _handlers(server, "agree", 3, _config(3, 3))
    try:
        infos = _join_all(handlers)
        assert sorted(i.rank for i in infos) == [0, 1, 2]
        assert {i.world_size for i in infos} == {3}
        assert {i.round for i in infos} == {0}
        assert {i.restart_count for i in infos} == {0}
        assert len({i.participants for i in infos}) == 1
        for handler, info in zip(handlers, infos, strict=True):
            assert info.participants[info.rank] == handler.node_id
            assert info.wait_list == ()
        # One bootstrap endpoint, decided by rank 0 and read by the others.
        assert len({i.bootstrap_store_info for i in infos}) == 1
        assert infos[0].bootstrap_store_info is not None
        assert infos[0].bootstrap_store_info.master_addr == "127.0.0.1"
        assert all(not h.use_agent_store and h.get_backend() == "tcp" for h in handlers)
        assert all(h.keep_alive_healthy() for h in handlers)
    finally:
        _shutdown(handlers)


def test_each_round_has_its_own_work_namespace(server: TensorplayStore) -> None:
    handlers = _handlers(server, "ns", 2, _config(2, 2))
    try:
        first = _join_all(handlers)
        first[0].store.set("barrier", b"round0")
        assert first[1].store.get("barrier") == b"round0"  # shared within a round
        assert server.get(f"{RunKeys('ns').work_prefix(0)}/barrier") == b"round0"
        handlers[0].open_next_round("scale_up")
        second = _join_all(handlers, reason="scale_up")
        assert {i.round for i in second} == {1}
        assert second[1].store.get("barrier") is None  # the earlier attempt's key is unseen
        assert second[0].store.raw is not None  # a tensorplay PrefixStore for tensorplay APIs
    finally:
        _shutdown(handlers)


def test_graceful_leave_opens_the_next_round_without_closing(server: TensorplayStore) -> None:
    # A last call long enough that all three make round 0 even on a loaded machine.
    handlers = _handlers(server, "leave", 3, _config(2, 3, last_call_timeout=1.0))
    try:
        _join_all(handlers)
        assert handlers[2].shutdown() is True
        assert handlers[2].shutdown() is True  # idempotent
        seen = handlers[0].watch()
        assert seen.next_opened == "membership" and seen.closed is None
        started = time.monotonic()
        infos = _join_all(handlers[:2])
        assert time.monotonic() - started < 2.5  # the last call (1 s), no heartbeat timeout
        assert {i.world_size for i in infos} == {2}
        assert {i.round for i in infos} == {1}
        assert not handlers[0].is_closed()
        with pytest.raises(RendezvousGracefulExitError, match="shut down"):
            handlers[2].next_rendezvous()
    finally:
        _shutdown(handlers)


def test_watch_reports_a_silent_successor_dead(server: TensorplayStore) -> None:
    handlers = _handlers(server, "dead", 2, _config(1, 2, last_call_timeout=1.0))
    try:
        _join_all(handlers)
        # Stop n1's heartbeat without a goodbye, as a SIGKILL would.
        victim = next(h for h in handlers if h.node_id == "n1")
        assert victim._keep_alive is not None
        victim._keep_alive.stop()
        watcher = handlers[0]
        deadline = time.monotonic() + 5.0
        seen = watcher.watch()
        while seen.next_opened is None and time.monotonic() < deadline:
            time.sleep(0.1)
            seen = watcher.watch()
        assert seen.next_opened == "membership"
        info = watcher.next_rendezvous()
        assert (info.world_size, info.round, info.rank) == (1, 1, 0)
    finally:
        _shutdown(handlers)


def test_late_joiner_waits_and_is_counted(server: TensorplayStore) -> None:
    config = _config(2, 3, last_call_timeout=0.2)
    handlers = _handlers(server, "late", 3, config)
    try:
        _join_all(handlers[:2])
        assert handlers[0].num_nodes_waiting() == 0
        with ThreadPoolExecutor(1) as pool:
            late = pool.submit(handlers[2].next_rendezvous)
            deadline = time.monotonic() + 5.0
            while handlers[0].num_nodes_waiting() == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert handlers[1].num_nodes_waiting() == 1
            assert handlers[0].watch().waiting == 1
            assert not late.done()
            handlers[0].open_next_round("scale_up")
            infos = _join_all(handlers[:2], reason="scale_up")
            last = late.result(timeout=10)
        assert {i.world_size for i in [*infos, last]} == {3}
        assert {i.round for i in [*infos, last]} == {1}
        assert sorted(i.rank for i in [*infos, last]) == [0, 1, 2]
    finally:
        _shutdown(handlers)


def test_failure_reason_counts_one_restart(server: TensorplayStore) -> None:
    handlers = _handlers(server, "fail", 2, _config(2, 2))
    try:
        _join_all(handlers)
        infos = _all(
            [
                lambda: handlers[0].next_rendezvous(reason="failure"),
                lambda: handlers[1].next_rendezvous(reason="failure"),
            ]
        )
        assert {i.restart_count for i in infos} == {1}
    finally:
        _shutdown(handlers)


def test_closed_rendezvous_refuses_joiners_and_keeps_the_first_outcome(
    server: TensorplayStore,
) -> None:
    handlers = _handlers(server, "closed", 2, _config(1, 1))
    try:
        handlers[0].next_rendezvous()
        handlers[0].set_closed("failed", "worker crashed")
        handlers[0].set_closed("succeeded")  # idempotent: the first outcome stands
        assert handlers[1].is_closed()
        assert handlers[0].watch().closed is not None
        with pytest.raises(RendezvousClosedError, match="worker crashed"):
            handlers[1].next_rendezvous()
    finally:
        _shutdown(handlers)


def test_close_before_any_round_blocks_the_forming_round() -> None:
    store = MemoryStore()
    closer = DynamicRendezvousHandler("early", _View(store), _config(1, 1), backend_name="x")
    closer.set_closed()
    joiner = DynamicRendezvousHandler("early", _View(store), _config(1, 1), backend_name="x")
    with pytest.raises(RendezvousClosedError):
        joiner.next_rendezvous()


def test_below_min_nodes_times_out_with_the_join_timeout_error() -> None:
    handler = DynamicRendezvousHandler(
        "few", MemoryStore(), _config(2, 2, join_timeout=0.6), backend_name="x"
    )
    started = time.monotonic()
    with pytest.raises(RendezvousJoinTimeoutError, match="only 1 of at least 2"):
        handler.next_rendezvous()
    assert time.monotonic() - started < 2.0
    assert handler.shutdown() is True


def test_foreign_bytes_under_our_keys_are_a_state_error() -> None:
    store = MemoryStore()
    store.set(RunKeys("junk").closed(), b"\x80\x04pickled?")
    handler = DynamicRendezvousHandler("junk", store, _config(1, 1), backend_name="x")
    with pytest.raises(RendezvousStateError, match="run 'junk'.*not a tpelastic closed record"):
        handler.is_closed()
    with pytest.raises(RendezvousStateError):
        handler.next_rendezvous()


def test_newer_schema_is_a_state_error_asking_for_an_upgrade() -> None:
    store = MemoryStore()
    store.set(RunKeys("new").closed(), b'{"v": 9, "kind": "closed", "outcome": "x", "reason": ""}')
    handler = DynamicRendezvousHandler("new", store, _config(1, 1), backend_name="x")
    with pytest.raises(RendezvousStateError, match="upgrade tpelastic"):
        handler.next_rendezvous()


def test_bad_reason_and_calls_before_a_round_are_one_line_errors() -> None:
    handler = DynamicRendezvousHandler("r", MemoryStore(), _config(1, 1), backend_name="x")
    with pytest.raises(ValueError, match="join reason must be one of"):
        handler.next_rendezvous(reason="because")
    with pytest.raises(RendezvousError, match="watch\\(\\) needs a completed round"):
        handler.watch()
    assert handler.num_nodes_waiting() == 0
    assert handler.keep_alive_healthy()


def test_keep_alive_unhealthy_once_heartbeats_stop_landing() -> None:
    store = MemoryStore()
    handler = DynamicRendezvousHandler("hb", _View(store), _config(1, 1), backend_name="x")
    handler.next_rendezvous()
    assert handler.keep_alive_healthy()
    store.close()  # every heartbeat fails from now on
    time.sleep(FAST["heartbeat_timeout"])  # > timeout - interval
    assert not handler.keep_alive_healthy()
    assert handler.shutdown() is False  # the leave could not be written; no exception


def test_keep_alive_of_the_store_host_never_lapses() -> None:
    # The membership core's rule (M3): the host's beats go to its own process.
    store = MemoryStore()
    handler = DynamicRendezvousHandler(
        "hb-host", _View(store), _config(1, 1), backend_name="x", store_host=object()
    )
    handler.next_rendezvous()
    store.close()
    time.sleep(FAST["heartbeat_timeout"])
    assert handler.keep_alive_healthy()
    assert handler.member_config().hosts_store
    handler.shutdown()


class _View:
    """One client of a shared MemoryStore: closing it does not close the others' store."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._closed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def close(self) -> None:
        self._closed = True


def test_settings_from_parameters_map_torchrun_keys() -> None:
    params = RendezvousParameters(
        "tcp",
        "127.0.0.1:1",
        "job",
        2,
        4,
        join_timeout="7",
        last_call_timeout=0.5,
        keep_alive_interval=2,
        keep_alive_max_attempt=4,
    )
    settings = RendezvousSettings.from_parameters(params)
    assert settings.run_id == "job"
    assert (settings.min_nodes, settings.max_nodes) == (2, 4)
    assert settings.config.join_timeout == 7.0
    assert settings.config.last_call_timeout == 0.5
    assert settings.keep_alive_interval == timedelta(seconds=2)
    assert (settings.keep_alive_max_attempt, settings.keep_alive_expiry) == (4, 8.0)
    one = RendezvousParameters("tcp", "h:1", "job", 1, 1, keep_alive_max_attempt=1)
    with pytest.raises(ValueError, match="keep_alive_max_attempt must be >= 2"):
        RendezvousSettings.from_parameters(one)
    with pytest.raises(ValueError, match="without '/'"):
        RendezvousSettings.from_config("a/b", _config(1, 1))


@pytest.mark.parametrize("backend", ["tcp", "c10d", "p10d"])
def test_create_handler_tcp_aliases_over_a_standalone_store(
    server: TensorplayStore, backend: str
) -> None:
    params = RendezvousParameters(
        backend,
        f"127.0.0.1:{server.raw.port}",
        f"alias-{backend}",
        1,
        1,
        local_addr="127.0.0.1",
        is_host="false",
        read_timeout=5,
    )
    handler = create_handler(params)
    try:
        assert isinstance(handler, DynamicRendezvousHandler)
        assert handler.get_backend() == backend
        assert handler.store_host is None
        info = handler.next_rendezvous()
        assert (info.rank, info.world_size) == (0, 1)
    finally:
        assert handler.shutdown()


def test_create_handler_hosts_the_store_when_the_endpoint_is_local() -> None:
    params = RendezvousParameters("c10d", "127.0.0.1:0", "hosted", 1, 1, is_host="true")
    handler = create_handler(params)
    try:
        assert isinstance(handler, DynamicRendezvousHandler)
        assert handler.store_host is not None
        assert handler.next_rendezvous().world_size == 1
    finally:
        handler.shutdown()


def test_file_backend_two_handlers_share_one_file(tmp_path: Path) -> None:
    path = str(tmp_path / "rdzv" / "store")
    conf: dict[str, Any] = {"last_call_timeout": 0.3, "keep_alive_interval": 0.2}
    handlers = [
        create_handler(RendezvousParameters("file", path, "files", 2, 2, **conf)) for _ in range(2)
    ]
    try:
        assert all(isinstance(h, DynamicRendezvousHandler) for h in handlers)
        infos = _all([h.next_rendezvous for h in handlers])
        assert sorted(i.rank for i in infos) == [0, 1]
        assert all(isinstance(h._store, TpRendezvousBackend) for h in handlers)  # type: ignore[attr-defined]
    finally:
        for handler in handlers:
            handler.shutdown()
    with pytest.raises(ValueError, match="file rendezvous backend cannot use store_type='tcp'"):
        create_handler(RendezvousParameters("file", path, "x", 1, 1, store_type="tcp"))


def test_shutdown_never_closes_and_stops_heartbeats(server: TensorplayStore) -> None:
    (handler,) = _handlers(server, "stop", 1, _config(1, 1))
    handler.next_rendezvous()
    handler.shutdown()
    key = RunKeys("stop").heartbeat(handler.node_id)
    before = server.get(key)
    time.sleep(0.5)
    assert server.get(key) == before
    assert server.get(RunKeys("stop").closed()) is None
    assert threading.active_count() < 50  # no keep-alive threads piling up


def test_regression_a_slot_never_written_cannot_hold_the_join_past_its_deadline() -> None:
    """Found while building the handler: a node that dies between taking an arrival slot and
    writing it left the closer looping in COLLECTING -> WAITING -> GATHERING forever (past the
    join deadline, with zero-length waits). It now times out with the join timeout error."""
    store = MemoryStore()
    store.add(RunKeys("ghost").arrivals(0), 1)  # slot 0 taken, never written
    config = _config(2, 2, join_timeout=1.0, last_call_timeout=0.1, heartbeat_timeout=0.5)
    handler = DynamicRendezvousHandler("ghost", store, config, backend_name="x", node_id="real")
    with ThreadPoolExecutor(1) as pool:
        joining = pool.submit(handler.next_rendezvous)
        with pytest.raises(RendezvousJoinTimeoutError, match="1 arrival\\(s\\) never wrote"):
            joining.result(timeout=5.0)
    handler.shutdown()


class _FailsFast:
    """A store whose first ``n`` calls fail at once, as a TCPStore call does when it hits port
    or accept-backlog pressure ("request failed"). A stand-in, because that pressure cannot be
    produced on demand without starving every other test on the machine of ports."""

    def __init__(self, inner: MemoryStore, n: int) -> None:
        self._inner = inner
        self.failures_left = n

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._inner, name)

        def call(*args: Any) -> Any:
            if self.failures_left > 0:
                self.failures_left -= 1
                raise StoreUnavailable("TCPStore compareSet: request failed")
            return method(*args)

        return call


def test_p10d_backend_retries_fast_failures_of_idempotent_calls_only() -> None:
    inner = MemoryStore()
    backend = P10dRendezvousBackend(_FailsFast(inner, 3))  # type: ignore[arg-type]
    backend.set("k", b"v")  # three fast failures, then it lands
    assert inner.get("k") == b"v"
    flaky = _FailsFast(inner, 1)
    with pytest.raises(StoreUnavailable):
        P10dRendezvousBackend(flaky).add("n", 1)  # type: ignore[arg-type]
    assert inner.get("n") is None  # add is never retried: it could count twice
    with pytest.raises(StoreUnavailable):
        P10dRendezvousBackend(_FailsFast(inner, 5)).get("k")  # type: ignore[arg-type]


def test_p10d_backend_does_not_retry_an_unreachable_server() -> None:
    probe = tcp_store("127.0.0.1", 0, is_server=True, timeout=1.0)
    port = probe.raw.port
    probe.close()  # nothing listens there now
    backend = P10dRendezvousBackend(tcp_store("127.0.0.1", port, is_server=False, timeout=0.7))
    started = time.monotonic()
    with pytest.raises(StoreUnavailable):
        backend.get("k")
    assert time.monotonic() - started < 1.3  # one read timeout, not four


def test_unreachable_store_is_a_connection_error_within_the_read_timeout() -> None:
    probe = tcp_store("127.0.0.1", 0, is_server=True, timeout=1.0)
    port = probe.raw.port
    probe.close()  # nothing listens there now
    params = RendezvousParameters(
        "tcp", f"127.0.0.1:{port}", "gone", 1, 1, is_host="false", read_timeout=0.8
    )
    handler = create_handler(params)
    started = time.monotonic()
    with pytest.raises(RendezvousConnectionError, match="run 'gone'.*could not connect"):
        handler.next_rendezvous()
    assert time.monotonic() - started < 3.0
    assert handler.shutdown() in (True, False)  # never raises


def _slow_rank0_publish(
    monkeypatch: pytest.MonkeyPatch, before_publish: Callable[[], None]
) -> None:
    """Rank 0 runs ``before_publish`` before it publishes its endpoint (a loaded or dying rank
    0): the real publish, a fault injected in front of it."""
    from tpelastic.adapters.rendezvous.info import RendezvousStoreInfo

    build = RendezvousStoreInfo.build.__func__  # type: ignore[attr-defined]

    def slow(cls: type, rank: int, *args: Any, **kwargs: Any) -> Any:
        if rank == 0:
            before_publish()
        return build(cls, rank, *args, **kwargs)

    monkeypatch.setattr(RendezvousStoreInfo, "build", classmethod(slow))


def test_a_follower_waits_out_a_slow_rank_0_past_the_takeover_delay(
    server: TensorplayStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0 publishes its endpoint 2.5 s after the round (takeover delay 1.1 s): the follower
    looks meanwhile, finds the round standing, and gets the endpoint; its node goes on."""
    config = _config(2, 2)
    assert config.takeover_delay < 2.5
    _slow_rank0_publish(monkeypatch, lambda: time.sleep(2.5))
    handlers = _handlers(server, "slow-rank0", 2, config)
    try:
        infos = _join_all(handlers)
        assert sorted(i.rank for i in infos) == [0, 1]
        assert (
            len(
                {
                    (i.bootstrap_store_info.master_addr, i.bootstrap_store_info.master_port)
                    for i in infos
                }
            )
            == 1
        )
    finally:
        _shutdown(handlers)


def test_a_follower_whose_rank_0_dies_before_publishing_joins_the_next_round(
    server: TensorplayStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0 stops its heartbeat and never publishes: the follower's look finds it dead, the
    next round opens, and the follower joins it (alone, min 1) instead of giving up."""
    handlers = _handlers(server, "dead-rank0", 2, _config(1, 2))
    rank0_gone, release = threading.Event(), threading.Event()

    def die() -> None:
        if rank0_gone.is_set():
            return  # the follower, rank 0 of the next round, publishes as usual
        for handler in handlers:
            if handler._joined is not None and handler._joined.rank == 0:
                assert handler._keep_alive is not None
                handler._keep_alive.stop(timeout=2.0)
        rank0_gone.set()
        release.wait(30)  # publishes nothing while the test looks

    _slow_rank0_publish(monkeypatch, die)
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(h.next_rendezvous) for h in handlers]
        assert rank0_gone.wait(20)
        done = None
        deadline = time.monotonic() + 20
        while done is None and time.monotonic() < deadline:
            done = next((f for f in futures if f.done()), None)
            time.sleep(0.05)
        assert done is not None
        info = done.result()
        assert (info.round, info.rank, info.world_size) == (1, 0, 1)
        release.set()
    _shutdown(handlers)
