"""The shipped conformance suite, run against every built-in KeyValueStore adapter.

TCP stores are real servers on 127.0.0.1; FileStore lives in a temp dir. Each factory call
returns an empty store (a fresh key namespace on the shared server).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from tpelastic.adapters.ports import KeyValueStore
from tpelastic.adapters.stores import (
    MemoryStore,
    PrefixedStore,
    TensorplayStore,
    file_store,
    hash_store,
    prefix_store,
    tcp_store,
)
from tpelastic.testing import store_contract as contract

_counter = itertools.count()


@pytest.fixture(scope="module")
def tcp_server() -> Iterator[TensorplayStore]:
    server = tcp_store("127.0.0.1", 0, is_server=True, timeout=5.0)
    yield server
    server.close()


def _factories(server: TensorplayStore, tmp: Path) -> dict[str, Callable[[], KeyValueStore]]:
    port = int(server.raw.port)

    def tcp_client() -> KeyValueStore:
        client = tcp_store("127.0.0.1", port, is_server=False, timeout=5.0)
        return prefix_store(f"contract{next(_counter)}", client)

    return {
        "memory": MemoryStore,
        "prefixed-memory": lambda: PrefixedStore(MemoryStore(), "ns"),
        "tcp": tcp_client,
        "tcp-own-server": lambda: tcp_store("127.0.0.1", 0, is_server=True, timeout=5.0),
        "file": lambda: file_store(str(tmp / f"store{next(_counter)}")),
        "hash": hash_store,
        "prefix-hash": lambda: prefix_store("p", hash_store()),
    }


STORE_KINDS = ("memory", "prefixed-memory", "tcp", "tcp-own-server", "file", "hash", "prefix-hash")


@pytest.fixture(params=STORE_KINDS)
def factory(
    request: pytest.FixtureRequest, tcp_server: TensorplayStore, tmp_path: Path
) -> Callable[[], KeyValueStore]:
    return _factories(tcp_server, tmp_path)[request.param]


@pytest.mark.parametrize("check", contract.ALL_CHECKS, ids=lambda c: c.__name__)
def test_contract_clause(check: Callable[..., None], factory: Callable[[], KeyValueStore]) -> None:
    check(factory)


@pytest.mark.parametrize("kind", ("tcp", "file", "hash", "prefix-hash", "prefixed-memory"))
def test_random_operations_agree_with_memory_model(
    kind: str, tcp_server: TensorplayStore, tmp_path: Path
) -> None:
    machine = contract.store_comparison_machine(_factories(tcp_server, tmp_path)[kind])
    chosen = settings.default
    if kind == "tcp":
        # Every TCPStore call is one TCP connection that then sits in TIME_WAIT for 60 s; the
        # machine's ~28k ephemeral ports are shared with every other test, so stay small here.
        chosen = settings(
            chosen,
            max_examples=min(chosen.max_examples, 40),
            stateful_step_count=min(chosen.stateful_step_count, 30),
        )
    run_state_machine_as_test(machine, settings=chosen)


class _ConflatesEmptyAndAbsent(MemoryStore):
    """A broken store, like a raw tensorplay store: b"" reads as absent."""

    def get(self, key: str) -> bytes | None:
        value = super().get(key)
        return None if value == b"" else value


def test_the_suite_catches_a_broken_store() -> None:
    with pytest.raises(contract.ContractViolation, match="empty value"):
        contract.check_empty_value_is_present(_ConflatesEmptyAndAbsent)
    with pytest.raises(contract.ContractViolation):
        run_state_machine_as_test(
            contract.store_comparison_machine(_ConflatesEmptyAndAbsent),
            settings=settings(
                settings.default,
                max_examples=200,
                database=None,
                report_multiple_bugs=False,
                phases=(Phase.generate,),  # finding it is the point; shrinking only costs time
            ),
        )
