"""N agents as separate processes on 127.0.0.1 over one TCPStore or one FileStore.

Each agent is ``scripts/dyn_agent.py``: it joins, prints one JSON line per event, watches the next
round every 0.25 s and rejoins when it opens, leaves on SIGTERM, opens the next round for waiting
nodes on SIGUSR1, and dies of SIGALRM after a hard timeout so it can never hang a test.
Heartbeats every 0.5 s, a node is dead after 4 missed ones (2 s), last call 1 s: each times the
machine's load factor (tests/machine_load.py).
"""

from __future__ import annotations

import json
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import machine_load
import pytest

from tpelastic.adapters.stores import tcp_store
from tpelastic.adapters.stores.file import LogFileStore
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.rendezvous import (
    DynamicRendezvousHandler,
    P10dRendezvousBackend,
    RendezvousParameters,
    RendezvousSettings,
    TpRendezvousBackend,
)

SCRIPT = Path(__file__).parent / "scripts" / "dyn_agent.py"
# Expiry 2 s on a quiet machine: a graceful leave must re-form well inside it. Under load an
# agent may not run for a second or more, so the heartbeat and the first round's last call
# (every gated agent must make it) stretch with the load.
HEARTBEATS_TO_EXPIRY = 4


def _conf() -> dict[str, Any]:
    load = machine_load.factor()
    return {
        "keep_alive_interval": 0.5 * load,
        "keep_alive_max_attempt": HEARTBEATS_TO_EXPIRY,
        "last_call_timeout": 1.0 * load,
        "join_timeout": 15,
        "read_timeout": 5,
        "is_host": "false",
    }


Event = dict[str, Any]


class Agent:
    """One agent process and the events it printed, read by a background thread."""

    def __init__(self, name: str, spec: dict[str, Any]) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), json.dumps({**spec, "name": name})],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: queue.Queue[Event] = queue.Queue()
        self.seen: list[Event] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.put(json.loads(line))

    def next(self, kind: str, timeout: float = 30.0) -> Event:
        """The next event of ``kind`` (earlier events of other kinds are kept in ``seen``)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                event = self.events.get(timeout=max(0.0, left))
            except queue.Empty:
                raise AssertionError(
                    f"{self.name}: no {kind!r} event within {timeout} s; saw {self.seen}; "
                    f"stderr: {self._stderr()}"
                ) from None
            self.seen.append(event)
            if event["event"] == kind:
                return event

    def quiet(self, kind: str, seconds: float) -> None:
        """Assert no ``kind`` event arrives for ``seconds``."""
        try:
            self.next(kind, timeout=seconds)
        except AssertionError:
            return
        raise AssertionError(f"{self.name}: unexpected {kind!r} event: {self.seen[-1]}")

    def go(self) -> None:
        """Let a gated agent join."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def signal(self, signo: int) -> float:
        self.proc.send_signal(signo)
        return time.time()

    def exit_code(self, timeout: float = 10.0) -> int:
        return self.proc.wait(timeout)

    def _stderr(self) -> str:
        if self.proc.poll() is None or self.proc.stderr is None:
            return "(running)"
        return self.proc.stderr.read()[-2000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


class Cluster:
    """Agents of one run over one store; the test process holds the store (so agents may come
    and go in any order) and kills every agent it started at the end."""

    def __init__(self, backend: str, endpoint: str, run_id: str) -> None:
        self.spec = {"backend": backend, "endpoint": endpoint, "run_id": run_id}
        self.conf = _conf()
        self.expiry = self.conf["keep_alive_interval"] * HEARTBEATS_TO_EXPIRY
        self.hard_timeout = machine_load.scaled(40.0)
        self.agents: list[Agent] = []

    def start(self, name: str, min_nodes: int, max_nodes: int, **conf: Any) -> Agent:
        spec = {**self.spec, "min": min_nodes, "max": max_nodes, "conf": {**self.conf, **conf}}
        agent = Agent(name, {**spec, "hard_timeout": self.hard_timeout})
        self.agents.append(agent)
        return agent

    def start_together(self, n: int, min_nodes: int, max_nodes: int, **conf: Any) -> list[Agent]:
        """Start ``n`` agents and let them join only once all are up: Python start-up takes
        longer than the last call, and a straggler would miss the first round."""
        spec = {**self.spec, "min": min_nodes, "max": max_nodes, "conf": {**self.conf, **conf}}
        agents = [
            Agent(f"a{i}", {**spec, "hard_timeout": self.hard_timeout, "gate": True})
            for i in range(n)
        ]
        self.agents += agents
        for agent in agents:
            agent.next("started")
        for agent in agents:
            agent.go()
        return agents

    def stop(self) -> None:
        for agent in self.agents:
            agent.stop()


def _agree(rounds: list[Event], world: int, round_no: int) -> None:
    """Every agent holds the same round: ranks 0..world-1, one participant list, in rank order."""
    assert [r["round"] for r in rounds] == [round_no] * len(rounds)
    assert sorted(r["rank"] for r in rounds) == list(range(world))
    assert {r["world"] for r in rounds} == {world}
    participants = rounds[0]["participants"]
    assert all(r["participants"] == participants for r in rounds)
    assert all(participants[r["rank"]] == r["node"] for r in rounds)
    assert len({tuple(r["master"]) for r in rounds}) == 1  # one bootstrap endpoint


@pytest.fixture(params=["tcp", "file", "etcd"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Cluster, Any]]:
    """A cluster over a TCPStore hosted by the test, a file store in a temp dir, or a real etcd;
    the second item is a client of the same store, for the test to look at the keys."""
    run_id = f"agents-{request.node.name.split('[')[0][-20:]}"
    store: Any
    if request.param == "etcd":
        with _etcd_agents(run_id) as pair:
            yield pair
        return
    if request.param == "tcp":
        server = tcp_store("127.0.0.1", 0, is_server=True, timeout=5.0)
        cluster = Cluster("tcp", f"127.0.0.1:{server.raw.port}", run_id)
        store = server
    else:
        path = str(tmp_path / "rdzv.store")
        cluster = Cluster("file", path, run_id)
        store = LogFileStore(path)
    try:
        yield cluster, store
    finally:
        cluster.stop()
        store.close()


@pytest.mark.slow
def test_agents_agree_then_survive_a_leave_and_a_crash(cluster: tuple[Cluster, Any]) -> None:
    agents_of, store = cluster
    agents = agents_of.start_together(4, 2, 4)
    _agree([a.next("round") for a in agents], world=4, round_no=0)

    # A graceful leave: the other three form round 1 quickly, and nobody closes the run.
    agents[3].signal(signal.SIGTERM)
    left = agents[3].next("left")  # its watch loop notices the signal within one look
    assert left["ok"] is True
    left_at = left["t"]
    assert agents[3].exit_code() == 0
    survivors = agents[:3]
    rounds = [a.next("round") for a in survivors]
    _agree(rounds, world=3, round_no=1)
    assert all(r["node"] != agents[3].seen[0]["node"] for r in rounds)
    after_leave = max(r["t"] for r in rounds) - left_at
    print(f"graceful leave -> new round in {after_leave:.3f} s")
    assert after_leave < agents_of.expiry
    assert store.get(RunKeys(agents_of.spec["run_id"]).closed()) is None

    # A crash without a goodbye: its ring predecessor finds it dead on its own clock.
    killed_at = agents[2].signal(signal.SIGKILL)
    agents[2].exit_code()
    rounds = [a.next("round") for a in agents[:2]]
    _agree(rounds, world=2, round_no=2)
    after_kill = max(r["t"] for r in rounds) - killed_at
    print(f"SIGKILL -> new round in {after_kill:.3f} s (keep-alive expiry {agents_of.expiry} s)")
    assert after_kill < agents_of.expiry + machine_load.scaled(1.5)
    assert all(a.proc.poll() is None for a in agents[:2])
    assert store.get(RunKeys(agents_of.spec["run_id"]).closed()) is None


@pytest.mark.slow
def test_late_joiner_waits_is_counted_and_is_admitted(cluster: tuple[Cluster, Any]) -> None:
    agents_of, _store = cluster
    first = agents_of.start_together(2, 2, 3)
    _agree([a.next("round") for a in first], world=2, round_no=0)
    late = agents_of.start("late", 2, 3)
    assert [a.next("waiting")["n"] for a in first] == [1, 1]
    late.quiet("round", 1.0)  # it waits: the running world is not disturbed
    first[0].signal(signal.SIGUSR1)  # an agent admitting the waiting node
    rounds = [a.next("round") for a in [*first, late]]
    _agree(rounds, world=3, round_no=1)


@pytest.mark.slow
def test_below_min_nodes_the_join_times_out(cluster: tuple[Cluster, Any]) -> None:
    agents_of, _store = cluster
    started = time.time()
    alone = agents_of.start("alone", 2, 2, join_timeout=1.0)
    error = alone.next("error")
    assert error["type"] == "RendezvousJoinTimeoutError"
    assert "only 1 of at least 2 nodes" in error["message"]
    # join_timeout 1 s plus a start; the default is 600 s
    assert error["t"] - started < machine_load.scaled(10.0)
    assert alone.exit_code() == 3


@pytest.mark.slow
def test_closed_rendezvous_ends_members_and_refuses_joiners(
    cluster: tuple[Cluster, Any],
) -> None:
    agents_of, store = cluster
    agents = agents_of.start_together(2, 2, 2)
    _agree([a.next("round") for a in agents], world=2, round_no=0)
    backend = P10dRendezvousBackend if agents_of.spec["backend"] == "tcp" else TpRendezvousBackend
    closer = DynamicRendezvousHandler(
        agents_of.spec["run_id"],
        backend(_client(agents_of, store)),
        RendezvousSettings.from_parameters(_params(agents_of)).config,
        backend_name="test",
    )
    closer.set_closed("succeeded", "job done")
    for agent in agents:
        closed = agent.next("closed")
        assert (closed["outcome"], closed["reason"]) == ("succeeded", "job done")
        assert agent.exit_code() == 0
    late = agents_of.start("late", 2, 2)
    error = late.next("error")
    assert error["type"] == "RendezvousClosedError"
    assert "job done" in error["message"]
    closer.shutdown()


def _params(agents_of: Cluster) -> RendezvousParameters:
    spec = agents_of.spec
    return RendezvousParameters(
        spec["backend"], spec["endpoint"], spec["run_id"], 2, 2, **agents_of.conf
    )


@contextmanager
def _etcd_agents(run_id: str) -> Iterator[tuple[Cluster, Any]]:
    """Agents over a real single-member etcd (CI installs etcd-server; skipped where absent)."""
    if shutil.which("etcd") is None:
        pytest.skip("the etcd binary is not installed (CI installs Debian's etcd-server)")
    fixtures = str(Path(__file__).resolve().parent.parent / "stores")
    if fixtures not in sys.path:
        sys.path.insert(0, fixtures)
    from etcd_fixtures import etcd_cluster

    from tpelastic.adapters.stores.etcd import EtcdStore

    with etcd_cluster(1) as etcd:
        host, port = etcd.endpoints[0]
        cluster = Cluster("etcd", f"{host}:{port}", run_id)
        store = EtcdStore(etcd.endpoints, timeout=5.0)
        try:
            yield cluster, store
        finally:
            cluster.stop()
            store.close()


def _client(agents_of: Cluster, store: Any) -> Any:
    if agents_of.spec["backend"] == "etcd":
        return store
    if agents_of.spec["backend"] == "tcp":
        return tcp_store("127.0.0.1", store.raw.port, is_server=False, timeout=5.0)
    return LogFileStore(agents_of.spec["endpoint"])


@pytest.mark.slow
def test_agents_host_the_store_themselves_when_the_endpoint_is_theirs() -> None:
    """No is_host given: the endpoint is local to all of them, so the first to bind hosts the
    TCPStore and the others connect as clients. The host must go last (its shutdown stops the
    store): the others leave, the host forms a round alone, then leaves too."""
    probe = tcp_store("127.0.0.1", 0, is_server=True, timeout=5.0)
    port = probe.raw.port
    probe.close()  # a port free a moment ago; rebinding right after stop() works
    agents_of = Cluster("c10d", f"127.0.0.1:{port}", "self-hosted")
    try:
        agents = agents_of.start_together(3, 1, 3, is_host=None)
        hosts = [a for a in agents if a.seen[0]["hosts"]]
        assert len(hosts) == 1
        _agree([a.next("round") for a in agents], world=3, round_no=0)
        others = [a for a in agents if a is not hosts[0]]
        for agent in others:
            agent.signal(signal.SIGTERM)
        for agent in others:
            assert agent.next("left")["ok"] is True
        alone = hosts[0].next("round")
        assert (alone["world"], alone["rank"]) == (1, 0)
        hosts[0].signal(signal.SIGTERM)
        assert hosts[0].next("left")["ok"] is True
        assert [a.exit_code() for a in agents] == [0, 0, 0]
    finally:
        agents_of.stop()


def test_etcd_down_entirely_is_a_connection_error_within_the_timeout() -> None:
    """Nothing listens at the etcd endpoints: one-line error within read_timeout."""
    pytest.importorskip("etcd3gw")
    from tpelastic.rendezvous import RendezvousConnectionError, create_handler

    probe = tcp_store("127.0.0.1", 0, is_server=True, timeout=5.0)
    port = probe.raw.port
    probe.close()  # a port nobody listens on now
    params = RendezvousParameters(
        "etcd", f"127.0.0.1:{port},127.0.0.1:{port}", "down", 1, 2, read_timeout="1"
    )
    started = time.monotonic()
    with pytest.raises(RendezvousConnectionError) as caught:
        create_handler(params)
    assert time.monotonic() - started < 5.0
    assert "\n" not in str(caught.value) and f"127.0.0.1:{port}" in str(caught.value)
