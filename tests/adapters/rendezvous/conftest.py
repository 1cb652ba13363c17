"""Fixtures shared by the rendezvous adapter tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tpelastic.adapters.stores.tcp_server import StoreServer


@pytest.fixture
def server() -> Iterator[StoreServer]:
    """Our TCPStore server on a free loopback port, stopped after the test."""
    served = StoreServer("127.0.0.1", 0).start()
    yield served
    served.stop()
