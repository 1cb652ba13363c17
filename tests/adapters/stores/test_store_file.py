"""LogFileStore, the file backend's store: the port's contract, atomic operations across real
processes, compaction under readers that hold the old file, and corrupt files named in one line."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from tpelastic.adapters.ports import KeyValueStore
from tpelastic.adapters.stores.errors import StoreCorrupt, StoreUnavailable
from tpelastic.adapters.stores.file import MAGIC, LogFileStore
from tpelastic.testing import store_contract as contract

_names = itertools.count()


def _factory(tmp_path: Path, **options: int) -> Callable[[], KeyValueStore]:
    return lambda: LogFileStore(str(tmp_path / f"store{next(_names)}"), **options)


@pytest.mark.parametrize("check", contract.ALL_CHECKS, ids=lambda c: c.__name__)
def test_contract_clause(check: Callable[..., None], tmp_path: Path) -> None:
    check(_factory(tmp_path))


def test_random_operations_agree_with_memory_model(tmp_path: Path) -> None:
    # A tiny compaction threshold: the machine's writes compact the log again and again.
    machine = contract.store_comparison_machine(_factory(tmp_path, compact_bytes=256))
    run_state_machine_as_test(machine, settings=settings(max_examples=30, deadline=None))


ADDER = textwrap.dedent(
    """
    import sys
    from tpelastic.adapters.stores.file import LogFileStore
    store = LogFileStore(sys.argv[1], compact_bytes=int(sys.argv[3]))
    won = store.set_if_absent("leader", sys.argv[2].encode())[0]
    for _ in range(100):
        store.add("count", 1)
        store.set("last", sys.argv[2].encode())
    print("won" if won else "lost")
    """
)


@pytest.mark.parametrize("compact_bytes", [4 * 1024 * 1024, 512], ids=["log", "compacting"])
def test_processes_count_exactly_and_one_of_them_wins_the_key(
    tmp_path: Path, compact_bytes: int
) -> None:
    path = str(tmp_path / "shared")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ADDER, path, f"p{i}", str(compact_bytes)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    outcomes = [proc.communicate(timeout=60)[0].strip() for proc in procs]
    assert all(proc.returncode == 0 for proc in procs)
    assert sorted(outcomes) == ["lost", "lost", "lost", "won"]
    store = LogFileStore(path)
    assert store.get("count") == b"400"
    assert store.get("leader") in {b"p0", b"p1", b"p2", b"p3"}
    if compact_bytes == 512:  # 800 writes of ~20 bytes each, kept near the live state
        assert os.path.getsize(path) < 4096
    store.close()


def test_a_reader_holding_the_old_file_follows_a_compaction(tmp_path: Path) -> None:
    path = str(tmp_path / "shared")
    writer, reader = LogFileStore(path, compact_bytes=256), LogFileStore(path)
    reader.set("kept", b"from before")
    for n in range(100):
        writer.set("hot", str(n).encode())
    assert os.path.getsize(path) < 256 * 2  # compacted, and renamed over the path
    assert reader.get("hot") == b"99" and reader.get("kept") == b"from before"
    reader.delete("kept")
    assert writer.get("kept") is None
    writer.close()
    reader.close()


def test_a_wait_returns_when_another_process_writes(tmp_path: Path) -> None:
    path = str(tmp_path / "shared")
    store = LogFileStore(path)
    code = (
        "import time; time.sleep(0.3)\n"
        "from tpelastic.adapters.stores.file import LogFileStore\n"
        f"LogFileStore({path!r}).set('ready', b'1')\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    started = time.monotonic()
    assert store.wait_for(["ready"], 30.0)
    assert time.monotonic() - started < 25.0
    assert proc.wait(30) == 0
    store.close()


def test_threads_share_one_store(tmp_path: Path) -> None:
    store = LogFileStore(str(tmp_path / "shared"))

    def bump() -> None:
        for _ in range(50):
            store.add("n", 1)

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert store.get("n") == b"200"
    store.close()


def test_a_foreign_or_cut_file_is_corrupt_state_named_by_its_path(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    foreign.write_bytes(b"not a store at all")
    with pytest.raises(StoreCorrupt, match="not a tpelastic file store"):
        LogFileStore(str(foreign)).get("k")
    cut = tmp_path / "cut"
    store = LogFileStore(str(cut))
    store.set("whole", b"record")
    with open(cut, "ab") as out:
        out.write(b"S\x05\x00\x00\x00ab")  # a key of 5 bytes, 2 written
    with pytest.raises(StoreCorrupt, match="cut short") as raised:
        LogFileStore(str(cut)).get("whole")
    assert "\n" not in str(raised.value) and str(cut) in str(raised.value)
    assert cut.read_bytes().startswith(MAGIC)


def test_a_path_that_cannot_hold_the_store_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable, match="file store") as raised:
        LogFileStore(str(tmp_path))  # a directory
    assert "\n" not in str(raised.value)


def test_a_removed_file_fails_later_calls_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "gone"
    store = LogFileStore(str(path))
    store.set("k", b"v")
    path.unlink()
    with pytest.raises(StoreUnavailable, match="was removed"):
        store.get("k")
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreUnavailable, match="after close"):
        store.get("k")
