"""What the agent's adapter tests share: a real TCPStore server on a free port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tpelastic.adapters.stores.tcp_server import StoreServer


@pytest.fixture
def server() -> Iterator[StoreServer]:
    served = StoreServer("127.0.0.1", 0).start()
    yield served
    served.stop()
