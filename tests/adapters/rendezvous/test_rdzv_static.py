"""StaticTCPRendezvous: real agent processes on 127.0.0.1 over a real TCPStore."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import machine_load
import pytest

from tpelastic.rendezvous import (
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousJoinTimeoutError,
    RendezvousParameters,
    StaticTCPRendezvous,
    create_handler,
)

AGENT = """
import json, sys
from tpelastic.rendezvous import RendezvousParameters, create_handler
port, rank, world = (int(a) for a in sys.argv[1:4])
params = RendezvousParameters(
    "static", f"127.0.0.1:{port}", "job7", world, world, rank=rank, join_timeout=20,
    read_timeout=5,
)
handler = create_handler(params)
info = handler.next_rendezvous()
again = handler.next_rendezvous()
print(json.dumps({
    "rank": info.rank, "world": info.world_size,
    "addr": info.bootstrap_store_info.master_addr, "port": info.bootstrap_store_info.master_port,
    "again": again == info, "agent_store": handler.use_agent_store,
}), flush=True)
# The host must outlive every use of its store: a TCPStore server that stops right after a
# write drops the wake-ups of clients waiting on it (see docs/stores.md).
if rank != 0:
    info.store.set(f"left/{rank}", b"1")
else:
    assert info.store.wait_for([f"left/{r}" for r in range(1, world)], 20)
handler.shutdown()
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _params(port: int, rank: int, world: int, **config: object) -> RendezvousParameters:
    return RendezvousParameters(
        "static", f"127.0.0.1:{port}", "job", world, world, rank=rank, **config
    )


@pytest.mark.slow
def test_three_agent_processes_agree_on_ranks_and_master() -> None:
    port, world = _free_port(), 3
    command = [sys.executable, "-c", AGENT, str(port)]
    # Non-host ranks start first: they must wait for the host rather than fail.
    agents = [
        subprocess.Popen([*command, str(r), str(world)], stdout=subprocess.PIPE, text=True)
        for r in (2, 1)
    ]
    time.sleep(0.5)
    agents.append(subprocess.Popen([*command, "0", str(world)], stdout=subprocess.PIPE, text=True))
    try:
        within = machine_load.scaled(25.0)  # three interpreters start on a shared machine
        outputs = [json.loads(agent.communicate(timeout=within)[0]) for agent in agents]
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
                agent.wait(10)
    assert [agent.returncode for agent in agents] == [0, 0, 0]
    assert sorted(out["rank"] for out in outputs) == [0, 1, 2]
    for out in outputs:
        assert out["world"] == world
        assert (out["addr"], out["port"]) == ("127.0.0.1", port)
        assert out["again"] is True
        assert out["agent_store"] is True


def test_missing_nodes_raise_join_timeout_every_time() -> None:
    handler = create_handler(_params(_free_port(), 0, 2, join_timeout="0.5"))
    message = r"1 of 2 nodes joined within 0.5 s \(missing ranks: 1\)"
    try:
        for _attempt in range(2):  # joining again must not count this node twice
            started = time.monotonic()
            with pytest.raises(RendezvousJoinTimeoutError, match=message):
                handler.next_rendezvous()
            assert time.monotonic() - started < 10  # 0.5 s, plus a first import on a loaded machine
    finally:
        handler.shutdown()


def test_no_host_is_a_connection_error_within_the_join_timeout() -> None:
    handler = create_handler(_params(_free_port(), 1, 2, join_timeout="1"))
    started = time.monotonic()
    with pytest.raises(RendezvousConnectionError, match="no store server at 127.0.0.1:"):
        handler.next_rendezvous()
    assert time.monotonic() - started < 4
    handler.shutdown()


def test_closed_rendezvous_refuses_joiners() -> None:
    port = _free_port()
    host = create_handler(_params(port, 0, 2, join_timeout="5"))
    late = create_handler(_params(port, 1, 2, join_timeout="5"))
    try:
        assert not host.is_closed()
        host.set_closed()
        assert host.is_closed()
        with pytest.raises(RendezvousClosedError, match="'job' is closed"):
            late.next_rendezvous()
        assert late.is_closed()
        with pytest.raises(RendezvousClosedError):
            host.next_rendezvous()
    finally:
        late.shutdown()
        host.shutdown()


def test_busy_port_cannot_host() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        handler = create_handler(_params(busy.getsockname()[1], 0, 1))
        with pytest.raises(RendezvousConnectionError, match="cannot host the store"):
            handler.next_rendezvous()


def test_single_node_round_and_is_host_override() -> None:
    port = _free_port()
    host = create_handler(_params(port, 0, 1, join_timeout="5"))
    try:
        info = host.next_rendezvous()
        assert (info.rank, info.world_size) == (0, 1)
        assert info.bootstrap_store_info is not None
        assert info.bootstrap_store_info.master_port == port
        info.store.set("from-agent", b"ok")  # the round's store is usable by the agent
        assert info.store.get("from-agent") == b"ok"
    finally:
        host.shutdown()
    handler = create_handler(_params(port, 0, 2, is_host="false"))
    assert isinstance(handler, StaticTCPRendezvous) and handler.is_host is False


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (RendezvousParameters("static", "h:1", "r", 1, 2, rank=0), "min_nodes == max_nodes"),
        (RendezvousParameters("static", "h:1", "r", 2, 2), "needs config key 'rank'"),
        (RendezvousParameters("static", "h:1", "r", 2, 2, rank=2), r"rank 2 is outside 0..1"),
        (RendezvousParameters("static", "", "r", 1, 1, rank=0), "needs an endpoint"),
        (RendezvousParameters("static", "h:0", "r", 1, 1, rank=0), "port 0 is not in 1..65535"),
        (RendezvousParameters("static", "h:1", "r", 1, 1, rank="x"), "rank='x' is not an integer"),
    ],
)
def test_bad_static_parameters(params: RendezvousParameters, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        create_handler(params)
