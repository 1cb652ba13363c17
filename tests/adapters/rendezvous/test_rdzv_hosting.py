"""open_rendezvous_store: who hosts the TCPStore, fallback to client, file stores."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tpelastic.adapters.rendezvous.hosting import (
    endpoint_is_local,
    local_addresses,
    open_rendezvous_store,
)
from tpelastic.rendezvous import RendezvousConnectionError, RendezvousParameters


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _params(endpoint: str, **config: object) -> RendezvousParameters:
    return RendezvousParameters("tcp", endpoint, "run", 1, 2, read_timeout="2", **config)


def test_local_endpoint_hosts_and_a_second_local_agent_becomes_client() -> None:
    endpoint = f"127.0.0.1:{_free_port()}"
    first = open_rendezvous_store(_params(endpoint))
    second = open_rendezvous_store(_params(endpoint))
    try:
        assert (first.is_host, second.is_host) == (True, False)
        assert first.endpoint == second.endpoint == endpoint
        first.store.set("k", b"v")
        assert second.store.get("k") == b"v"
    finally:
        second.store.close()
        first.store.close()


def test_is_host_config_overrides() -> None:
    endpoint = f"127.0.0.1:{_free_port()}"
    client = open_rendezvous_store(_params(endpoint, is_host="false"))
    assert client.is_host is False
    host = open_rendezvous_store(_params(endpoint, is_host="true"))
    try:
        assert host.is_host is True
        with pytest.raises(RendezvousConnectionError, match="is_host=true but this agent cannot"):
            open_rendezvous_store(_params(endpoint, is_host="1"))
    finally:
        host.store.close()


def test_file_store_type_uses_the_endpoint_as_a_path(tmp_path: Path) -> None:
    path = str(tmp_path / "rdzv")
    opened = open_rendezvous_store(_params(path, store_type="file"))
    again = open_rendezvous_store(_params(path, store_type="file"))
    opened.store.set("k", b"1")
    assert again.store.get("k") == b"1"
    assert opened.is_host is False
    with pytest.raises(RendezvousConnectionError, match="file store"):
        open_rendezvous_store(
            _params(str(tmp_path / "missing" / "deeper" / "x"), store_type="file")
        )


def test_endpoint_locality() -> None:
    assert endpoint_is_local("localhost")
    assert endpoint_is_local("127.0.0.1")
    assert endpoint_is_local("::1")
    assert endpoint_is_local(socket.gethostname())
    assert not endpoint_is_local("")
    assert not endpoint_is_local("no-such-host.invalid")
    assert "203.0.113.9" not in local_addresses()  # TEST-NET-3: never assigned to a real host
    assert not endpoint_is_local("203.0.113.9")


def test_endpoint_without_host_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a host"):
        open_rendezvous_store(_params(""))
