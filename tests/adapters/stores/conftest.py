"""Fixtures shared by the store tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from etcd_fixtures import ETCD, SKIP_REASON, EtcdCluster, etcd_cluster


@pytest.fixture(scope="module")
def etcd() -> Iterator[EtcdCluster]:
    """One real etcd member on 127.0.0.1 for the whole test module (skipped without etcd)."""
    if ETCD is None:
        pytest.skip(SKIP_REASON)
    with etcd_cluster(1) as cluster:
        yield cluster
