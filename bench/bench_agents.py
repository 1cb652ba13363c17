"""Processes of the rendezvous benchmark: a store server, and hosts that run many agents as threads.

Run by ``bench/rendezvous_convergence.py``, never by hand::

    python bench/bench_agents.py server --impl ours
    python bench/bench_agents.py host --impl ours --port P --size N --first I --count K ...

A host builds ``K`` agent threads (each with its own store client), prints ``READY``, waits for
``go`` on stdin, lets every agent join, and prints one ``REC {json}`` line per agent. Agents of
``ours`` call :func:`tpelastic.adapters.rendezvous.driver.run_join` directly (the handler is a thin
wrapper being built elsewhere); the anchors call ``next_rendezvous()`` on the c10d dynamic handler
of tensorplay or torch. Every wait is bounded by ``--timeout``; a host never outlives it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from tpelastic.adapters.ports import KeyValueStore

HOST = "127.0.0.1"
RUN_ID = "bench"
# Bench-only coordination keys (not part of any protocol, not counted): "everyone has round 0".
_R0_DONE = "bench/r0done"
_R0_ALL = "bench/r0all"
_OUT = threading.Lock()
IMPLS = ("ours", "ours-tpstore", "ours-memory", "tensorplay", "torch")
# ours: our TCPStore server and client (the default store_type=tcp); ours-tpstore: the same
# protocol over tensorplay's TCPStore server and client (store_type=tensorplay).


def emit(tag: str, payload: dict[str, Any]) -> None:
    """One line on stdout for the orchestrator; the lock keeps threads' lines whole."""
    with _OUT:
        sys.stdout.write(f"{tag} {json.dumps(payload)}\n")
        sys.stdout.flush()


class CountingStore:
    """A KeyValueStore that forwards every call and counts it by method name (thread-safe)."""

    def __init__(self, inner: KeyValueStore) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.first_add_done = 0.0  # for a join: when this agent's arrival was counted
        self.held_waits = 0  # held waits for a change (not store operations: they only wait)

    def _count(self, name: str) -> None:
        with self._lock:
            self.counts[name] += 1

    def total(self) -> int:
        with self._lock:
            return sum(self.counts.values())

    def get(self, key: str) -> bytes | None:
        self._count("get")
        return self._inner.get(key)

    def set(self, key: str, value: bytes) -> None:
        self._count("set")
        self._inner.set(key, value)

    def add(self, key: str, amount: int) -> int:
        self._count("add")
        value = self._inner.add(key, amount)
        self.first_add_done = self.first_add_done or time.monotonic()
        return value

    def set_if_absent(self, key: str, value: bytes) -> tuple[bool, bytes]:
        self._count("set_if_absent")
        return self._inner.set_if_absent(key, value)

    def compare_and_set(
        self, key: str, expected: bytes | None, value: bytes
    ) -> tuple[bool, bytes | None]:
        self._count("compare_and_set")
        return self._inner.compare_and_set(key, expected, value)

    def wait_for(self, keys: Sequence[str], timeout: float) -> bool:
        self._count("wait_for")
        return self._inner.wait_for(keys, timeout)

    def delete(self, key: str) -> None:
        self._count("delete")
        self._inner.delete(key)

    def multi_get(self, keys: Sequence[str]) -> list[bytes | None]:
        """One operation (one round trip) when the store has it; else one get per key."""
        inner = getattr(self._inner, "multi_get", None)
        if inner is None:
            return [self.get(key) for key in keys]
        self._count("multi_get")
        return list(inner(keys))

    def close(self) -> None:
        self._inner.close()


def raise_file_limit() -> None:
    """Thousands of persistent connections need more descriptors than the default soft limit."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def open_client(impl: str, port: int, read_timeout: float) -> KeyValueStore:
    """One agent's own store client for ``impl``."""
    if impl == "ours-tpstore":
        from tpelastic.adapters.stores import tcp_store

        return tcp_store(HOST, port, is_server=False, timeout=read_timeout)
    from tpelastic.adapters.stores.tcp_client import connect

    return connect(HOST, port, timeout=read_timeout)


# --- server --------------------------------------------------------------------------------------


def serve(impl: str, lifetime: float) -> None:
    """Host one TCPStore server until stdin closes: ours for ``ours``, torch's for torch,
    tensorplay's otherwise."""
    raise_file_limit()
    if impl == "ours":
        from tpelastic.adapters.stores.tcp_server import StoreServer

        server: Any = StoreServer(HOST, 0).start()
        port = server.port
    elif impl == "torch":
        from datetime import timedelta

        from torch.distributed import TCPStore as TorchTCPStore  # type: ignore[attr-defined]

        server = TorchTCPStore(
            HOST, 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60)
        )
        port = server.port
    else:
        from tpelastic.adapters.stores import tcp_store

        server = tcp_store(HOST, 0, is_server=True, timeout=60.0)
        port = server.raw.port
    emit("PORT", {"port": int(port)})
    # The orchestrator closes stdin (or kills us); the lifetime bounds an orphaned server.
    waiter = threading.Thread(target=sys.stdin.readline, daemon=True)
    waiter.start()
    waiter.join(lifetime)
    os._exit(0)


# --- agents --------------------------------------------------------------------------------------


class Host:
    """What every agent thread of one host process shares: the arguments and the go signal."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.go = threading.Event()
        self.deadline = 0.0  # set at go
        # ours-memory: every agent of the (single) host shares one in-process store, which
        # measures the protocol without any network or TCPStore limits.
        self.shared: KeyValueStore | None = None
        if args.impl == "ours-memory":
            from tpelastic.adapters.stores import MemoryStore

            self.shared = MemoryStore()

    def remaining(self) -> float:
        return max(0.1, self.deadline - time.monotonic())


def _our_configs(args: argparse.Namespace) -> tuple[Any, Any]:
    """Round 0 uses min = max = N. The measured re-rendezvous round admits the change."""
    from tpelastic.core.rendezvous.config import RendezvousConfig

    n, scenario = args.size, args.scenario
    beat = {
        "heartbeat_interval": args.heartbeat_interval,
        "heartbeat_timeout": args.heartbeat_timeout,
    }
    first = RendezvousConfig(
        min_nodes=n,
        max_nodes=n,
        join_timeout=args.timeout,
        last_call_timeout=args.last_call,
        **beat,
    )
    if scenario in ("leave", "crash"):
        low, high = n - 1, n
    else:
        low, high = n, n + 1
    again = RendezvousConfig(
        min_nodes=max(1, low),
        max_nodes=high,
        join_timeout=args.timeout,
        last_call_timeout=args.last_call,
        **beat,
    )
    return first, again


def our_agent(host: Host, index: int, record: dict[str, Any]) -> None:
    """One agent of ours: join round 0, then play its part in the scenario."""
    from tpelastic.adapters.rendezvous.driver import KeepAlive, run_join

    args = host.args
    raw: KeyValueStore = host.shared or open_client(args.impl, args.port, args.read_timeout)
    first, again = _our_configs(args)
    node = f"node{index}"
    late = args.role == "late"
    beat_store = CountingStore(raw)
    keep = KeepAlive(
        beat_store, again if args.scenario != "none" else first, run_id=RUN_ID, node=node
    )
    host.go.wait(args.timeout)
    keep.start()
    try:
        if late:
            raw.wait_for([_R0_ALL], host.remaining())
            record["t_event"] = time.monotonic()
            _our_rejoin(raw, again, node, None, "first", record)
            return
        joined = CountingStore(raw)
        record["t_call"] = time.monotonic()
        done = run_join(joined, first, run_id=RUN_ID, node=node)
        record["t_done"] = time.monotonic()
        record["t_arrived"] = joined.first_add_done
        record.update(rank=done.rank, world=done.result.world_size, ops=dict(joined.counts))
        record["closer"] = done.result.closer == node
        if args.scenario == "none":
            return
        if raw.add(_R0_DONE, 1) == args.size:
            raw.set(_R0_ALL, b"1")
        if args.role in ("leave", "crash"):
            _victim(host, raw, done.result, node, keep, record)
            return
        reason = _watch(host, raw, again, done.result, node, record)
        _our_rejoin(raw, again, node, done.result, reason, record)
    finally:
        record["hb_ops"] = beat_store.total()
        keep.stop(0.5)


def _our_rejoin(
    raw: Any, config: Any, node: str, held: Any, reason: str, record: dict[str, Any]
) -> None:
    """Rejoin from ``held``, the round this agent completed with (as the handler does), or
    join as a newcomer (None)."""
    from tpelastic.adapters.rendezvous.driver import run_join

    from_round = held.round_no if held is not None else None

    joined = CountingStore(raw)
    record["t_call1"] = time.monotonic()
    done = run_join(
        joined,
        config,
        run_id=RUN_ID,
        node=node,
        from_round=from_round,
        reason=reason,
        held=held,
    )
    record["t_done1"] = time.monotonic()
    record.update(rank1=done.rank, world1=done.result.world_size, ops1=dict(joined.counts))
    record["round1"] = done.result.round_no
    record["closer1"] = done.result.closer == node


def _victim(
    host: Host, raw: Any, result: Any, node: str, keep: Any, record: dict[str, Any]
) -> None:
    """Leave gracefully (leave_ops) or die without a goodbye (SIGKILL of this whole process)."""
    from tpelastic.adapters.rendezvous.driver import execute_ops
    from tpelastic.core.rendezvous.keys import RunKeys
    from tpelastic.core.rendezvous.membership import leave_ops

    raw.wait_for([_R0_ALL], host.remaining())
    if host.args.role == "crash":
        # Report round 0 and the instant of death first: nothing runs after the kill.
        record["t_event"] = time.monotonic()
        emit("EVENT", record)
        os.kill(os.getpid(), signal.SIGKILL)
    keep.stop(0.5)
    record["t_event"] = time.monotonic()
    execute_ops(raw, leave_ops(RunKeys(RUN_ID), result, node))
    record["left"] = True


def _watch(
    host: Host, raw: Any, config: Any, result: Any, node: str, record: dict[str, Any]
) -> str:
    """Watch the next round as the agent does; return why to rejoin.

    Between looks a held store wait for any of the keys that end the world (closed, the next
    round opened, an arrival at it) wakes the member at once, as the agent's round watcher
    does; a look (the watch batch and the ring successor's heartbeat, judged on this thread's
    clock) is due every ``--watch-interval`` s (0: the agent's own look period,
    ``liveness.look_period`` of the heartbeat interval). ``--watch-poll`` only looks, sleeping
    in between (stores without a held wait).
    """
    from tpelastic.adapters.rendezvous.driver import execute_ops
    from tpelastic.core.rendezvous.keys import RunKeys
    from tpelastic.core.rendezvous.liveness import LivenessTracker, look_period
    from tpelastic.core.rendezvous.membership import (
        open_next_round_ops,
        read_watch,
        report_dead_ops,
        ring_successor,
        watch_ops,
    )
    from tpelastic.core.rendezvous.records import decode_counter

    keys, store = RunKeys(RUN_ID), CountingStore(raw)
    successor = ring_successor(result, node)
    liveness = LivenessTracker()
    every = host.args.watch_interval or look_period(config.heartbeat_interval)
    held = None if host.args.watch_poll else getattr(raw, "wait_any", None)
    nxt = result.round_no + 1
    change = [keys.closed(), keys.opened(nxt), keys.arrivals(nxt)]
    try:
        while time.monotonic() < host.deadline:
            seen = read_watch(execute_ops(store, watch_ops(keys, result.round_no)))
            if seen.closed is not None:
                raise RuntimeError("rendezvous closed during the benchmark")
            if seen.next_opened is not None:
                return "rejoin"
            if seen.waiting > 0 and result.world_size < config.max_nodes:
                execute_ops(store, open_next_round_ops(keys, result, "scale_up"))
                return "scale_up"
            if seen.waiting > 0 and keys.arrivals(nxt) in change:
                change.remove(keys.arrivals(nxt))  # stays present: the agent stops waiting on it
            if successor is not None:
                now = time.monotonic()
                liveness = liveness.observe(
                    successor, decode_counter(store.get(keys.heartbeat(successor))), now
                )
                if liveness.is_dead(successor, now, config.heartbeat_timeout):
                    execute_ops(store, report_dead_ops(keys, result, successor))
                    record["reported_dead"] = successor
                    return "rejoin"
            if held is None:
                time.sleep(every)
            else:
                store.held_waits += 1
                held(change, every)
        raise TimeoutError("no next round before the benchmark deadline")
    finally:
        record["watch_ops"] = store.total()
        record["watch_held"] = store.held_waits


# --- anchors -------------------------------------------------------------------------------------

_ANCHOR_OPS: dict[int, Counter[str]] = {}
_ANCHOR_BY_THREAD: dict[int, int] = {}
_ANCHOR_LOCK = threading.Lock()


def _instrument_anchor(backend_cls: Any) -> None:
    """Count every store call the c10d state backend makes, per backend instance.

    Patching the benchmark's own process is the only way to see inside the anchors; the counts
    cover state reads/writes (joins, polls, keep-alives) but not the handler's other store use.
    """
    init, call, set_state = backend_cls.__init__, backend_cls._call_store, backend_cls.set_state

    def counted_init(self: Any, *a: Any, **k: Any) -> None:
        with _ANCHOR_LOCK:
            _ANCHOR_OPS[id(self)] = Counter()
            _ANCHOR_BY_THREAD[threading.get_ident()] = id(self)
        init(self, *a, **k)

    def counted_call(self: Any, op: str, *a: Any, **k: Any) -> Any:
        with _ANCHOR_LOCK:
            _ANCHOR_OPS[id(self)][op] += 1
        return call(self, op, *a, **k)

    def counted_set_state(self: Any, *a: Any, **k: Any) -> Any:
        outcome = set_state(self, *a, **k)
        lost = outcome is not None and len(outcome) == 3 and not outcome[2]
        with _ANCHOR_LOCK:
            _ANCHOR_OPS[id(self)]["cas_failed" if lost else "cas_won"] += 1
        return outcome

    backend_cls.__init__ = counted_init
    backend_cls._call_store = counted_call
    backend_cls.set_state = counted_set_state


def _anchor_modules(impl: str) -> tuple[Any, Any, Any]:
    if impl == "torch":
        from torch.distributed.elastic.rendezvous import (
            RendezvousParameters,
            rendezvous_handler_registry,
        )
        from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as backend

        return RendezvousParameters, rendezvous_handler_registry, backend
    from tensorplay.distributed.elastic.rendezvous import RendezvousParameters as TpParameters
    from tensorplay.distributed.elastic.rendezvous import c10d_rendezvous_backend as tp_backend
    from tensorplay.distributed.elastic.rendezvous import get_registry

    return TpParameters, get_registry(), tp_backend


def anchor_agent(host: Host, index: int, record: dict[str, Any]) -> None:
    """One agent of an anchor: a c10d dynamic handler, min = max = N, one next_rendezvous()."""
    args = host.args
    params_cls, registry, _ = _anchor_modules(args.impl)
    params = params_cls(
        backend="c10d",
        endpoint=f"{HOST}:{args.port}",
        run_id=RUN_ID,
        min_nodes=args.size,
        max_nodes=args.size,
        local_addr=HOST,  # also where rank 0 hosts the bootstrap store: must resolve
        is_host=False,
        join_timeout=int(args.timeout),
        read_timeout=int(args.read_timeout),
    )
    handler = registry.create_handler(params)
    mine = _ANCHOR_BY_THREAD.get(threading.get_ident())
    host.go.wait(args.timeout)
    before = Counter(_ANCHOR_OPS.get(mine or 0, Counter()))
    record["t_call"] = time.monotonic()
    info = handler.next_rendezvous()
    record["t_done"] = time.monotonic()
    rank, world = (info.rank, info.world_size) if hasattr(info, "rank") else (info[1], info[2])
    record.update(rank=rank, world=world)
    with _ANCHOR_LOCK:
        record["ops"] = dict(_ANCHOR_OPS.get(mine or 0, Counter()) - before)


# --- host process --------------------------------------------------------------------------------


def _agent_thread(
    host: Host, index: int, body: Callable[[Host, int, dict[str, Any]], None]
) -> None:
    record: dict[str, Any] = {"index": index, "role": host.args.role}
    try:
        body(host, index, record)
    except BaseException as error:  # reported, never raised: one agent must not stop the others
        record["error"] = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
    emit("REC", record)


def _import_up_front(impl: str) -> None:
    """Load what agent threads import lazily, so hundreds of them do not queue on the import
    lock at the start (a simulation artifact: one node imports once)."""
    import tpelastic.adapters.rendezvous.driver
    import tpelastic.core.rendezvous.membership  # noqa: F401

    if impl.startswith("ours") and impl != "ours-memory":
        import socket

        socket.getaddrinfo(HOST, 1)  # loads the codec getaddrinfo needs, once


def _count_result_decodes() -> list[int]:
    """Count real decodes of round results in this process (the core caches them by bytes, but
    threads that receive the result at the same moment all miss the cache together)."""
    from tpelastic.core.rendezvous import records

    count = [0]
    decode = records._decode_result

    def counted(raw: bytes) -> Any:
        count[0] += 1
        return decode(raw)

    records._decode_result = counted  # type: ignore[assignment]
    return count


def run_host(args: argparse.Namespace) -> None:
    """Start the agents, wait for go, let them run until done or the deadline, then exit."""
    raise_file_limit()
    # Hundreds of threads per process: a thread waiting for the GIL wakes every switch interval
    # to ask for it, and at the default 5 ms those wake-ups alone burned most of the CPU of a
    # 2048-agent run. A node runs one agent; this only keeps the simulation from drowning in it.
    sys.setswitchinterval(args.switch_interval)
    _import_up_front(args.impl)
    decodes = _count_result_decodes()
    host = Host(args)
    body: Callable[[Host, int, dict[str, Any]], None] = our_agent
    if not args.impl.startswith("ours"):
        _instrument_anchor(_anchor_modules(args.impl)[2].C10dRendezvousBackend)
        body = anchor_agent
    threading.stack_size(512 * 1024)  # thousands of threads: keep each stack small
    threads = [
        threading.Thread(target=_agent_thread, args=(host, i, body), daemon=True)
        for i in range(args.first, args.first + args.count)
    ]
    for thread in threads:
        thread.start()
    emit("READY", {"first": args.first, "count": args.count})
    got = sys.stdin.readline()  # the orchestrator kills us if it never sends go
    host.deadline = time.monotonic() + args.timeout
    if got.strip() == "go":
        host.go.set()
    for thread in threads:
        thread.join(max(0.0, host.deadline - time.monotonic()))
    alive = sum(t.is_alive() for t in threads)
    emit(
        "HOSTDONE",
        {
            "first": args.first,
            "alive": alive,
            "result_decodes": decodes[0],
            "cpu_s": time.process_time(),
        },
    )
    os._exit(0)  # anchors leave non-daemon keep-alive timers behind: do not wait for them


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("what", choices=("server", "host"))
    parser.add_argument("--impl", choices=IMPLS, required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--size", type=int, default=0)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--scenario", choices=("none", "leave", "crash", "late"), default="none")
    parser.add_argument("--role", choices=("agent", "leave", "crash", "late"), default="agent")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--read-timeout", type=float, default=60.0)
    parser.add_argument("--heartbeat-interval", type=float, default=5.0)
    parser.add_argument("--heartbeat-timeout", type=float, default=15.0)
    parser.add_argument("--last-call", type=float, default=30.0)
    parser.add_argument("--watch-interval", type=float, default=0.0)
    parser.add_argument("--watch-poll", action="store_true")
    parser.add_argument(
        "--switch-interval", type=float, default=0.005, help="sys.setswitchinterval"
    )
    args = parser.parse_args(argv)
    if args.what == "server":
        serve(args.impl, lifetime=args.timeout)
    else:
        run_host(args)


if __name__ == "__main__":
    main()
