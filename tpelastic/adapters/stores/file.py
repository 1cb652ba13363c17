"""LogFileStore: a KeyValueStore in one file that every process opening the same path shares.

The rendezvous of the ``file`` backend lives here (a path on a file system every node mounts),
so an agent on it needs no tensorplay. Only agents read it: the workers get a TCPStore of their
own (:mod:`tpelastic.adapters.rendezvous.bootstrap`).

* **Format.** The file is a log of records, each one ``os.write`` appended while holding an
  exclusive ``flock``: ``S`` key value (a set) or ``D`` key (a delete), each field a
  little-endian ``uint32`` length and its bytes, after an 8-byte magic header. The state is the
  log replayed; every process keeps what it has replayed and reads only what others appended
  since, under a shared lock.
* **Atomic operations** (``add``, ``set_if_absent``, ``compare_and_set``) read and append under
  one exclusive lock, so no other process writes between the read and the write.
* **Compaction.** When the log passes ``compact_bytes`` and holds four times what is live, the
  writer holding the lock writes the live state to a new file and renames it over the path.
  Every process checks, once it holds the lock, that its descriptor is still the file at the
  path, and re-opens and replays it when it is not.
* **Waits** poll (1 ms, doubling to 50 ms): a file system has no wake-up that reaches other
  machines.
* A record cut short (a process killed in the middle of its write, which one ``write`` makes
  unlikely) or bytes that are not a record make every later call fail with one line naming
  the file: corrupt state is never guessed at.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock
from tpelastic.adapters.stores.errors import StoreCorrupt, StoreUnavailable

MAGIC = b"TPEFS01\n"
_U32 = struct.Struct("<I")
_SET = b"S"
_DELETE = b"D"
_FIRST_POLL = 0.001
_LONGEST_POLL = 0.05
COMPACT_BYTES = 4 * 1024 * 1024

T = TypeVar("T")


def _record(kind: bytes, key: bytes, value: bytes | None = None) -> bytes:
    parts = [kind, _U32.pack(len(key)), key]
    if value is not None:
        parts += [_U32.pack(len(value)), value]
    return b"".join(parts)


class _Cut(Exception):
    """The log ends inside a record."""


class LogFileStore:
    """The store in the file at ``path`` (created, and its parent folder if only that is missing).

    Args:
        path: the file every process of the run opens.
        compact_bytes: the log size from which a writer may compact it.

    Raises:
        StoreUnavailable: the file cannot be created or opened, or is not such a store.
    """

    def __init__(
        self, path: str, *, compact_bytes: int = COMPACT_BYTES, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self._clock = clock
        self.path = str(path)
        self._compact_bytes = compact_bytes
        self._lock = threading.RLock()
        self._data: dict[bytes, bytes] = {}
        self._offset = 0
        self._log_bytes = 0
        self._closed = False
        self._fd = -1
        try:
            # One level, as tensorplay's FileStore: a path under a share that is not mounted
            # fails here rather than giving this node a file of its own.
            parent = os.path.dirname(os.path.abspath(self.path))
            if not os.path.isdir(parent):
                os.mkdir(parent)
            self._open()
        except OSError as error:
            raise StoreUnavailable(f"file store {self.path}: {error.strerror or error}") from None

    # -- the file -----------------------------------------------------------------------------

    def _open(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_size == 0:
                os.write(fd, MAGIC)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            os.close(fd)
            raise
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = fd
        self._data, self._offset, self._log_bytes = {}, 0, 0

    def _locked(self, exclusive: bool) -> None:
        """Take the file's lock on the file now at the path (re-opened after a compaction)."""
        while True:
            fcntl.flock(self._fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                current = os.stat(self.path)
            except FileNotFoundError:
                current = None
            mine = os.fstat(self._fd)
            if current is not None and (current.st_ino, current.st_dev) == (
                mine.st_ino,
                mine.st_dev,
            ):
                return
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            if current is None:
                raise StoreUnavailable(f"file store {self.path}: the file was removed")
            self._open()

    def _replay(self) -> None:
        """Apply what was appended since our last read (caller holds the file's lock)."""
        size = os.fstat(self._fd).st_size
        if size == self._offset:
            return
        chunk = os.pread(self._fd, size - self._offset, self._offset)
        start = 0
        if self._offset == 0:
            if not chunk.startswith(MAGIC):
                raise StoreCorrupt(self.path, "not a tpelastic file store")
            start = len(MAGIC)
        try:
            done = self._apply(chunk, start)
        except _Cut:
            raise StoreCorrupt(self.path, f"a record is cut short at byte {size}") from None
        self._offset += done
        self._log_bytes = self._offset

    def _apply(self, chunk: bytes, at: int) -> int:
        end = len(chunk)
        while at < end:
            kind = chunk[at : at + 1]
            key, at = self._field(chunk, at + 1)
            if kind == _SET:
                value, at = self._field(chunk, at)
                self._data[key] = value
            elif kind == _DELETE:
                self._data.pop(key, None)
            else:
                raise StoreCorrupt(self.path, f"unknown record {kind!r} at byte {at}")
        return at

    @staticmethod
    def _field(chunk: bytes, at: int) -> tuple[bytes, int]:
        if at + 4 > len(chunk):
            raise _Cut
        (length,) = _U32.unpack_from(chunk, at)
        at += 4
        if at + length > len(chunk):
            raise _Cut
        return chunk[at : at + length], at + length

    def _append(self, record: bytes) -> None:
        """Append one record (caller holds the exclusive lock and has replayed)."""
        view = memoryview(record)
        while view:  # one write in practice; a short one is finished, still under the lock
            view = view[os.write(self._fd, view) :]
        self._offset += len(record)
        self._log_bytes = self._offset

    def _maybe_compact(self) -> None:
        if self._log_bytes < self._compact_bytes:
            return
        live = sum(9 + len(k) + len(v) for k, v in self._data.items())
        if self._log_bytes < 4 * live:
            return
        staging = f"{self.path}.{os.getpid()}.{threading.get_ident()}.compact"
        body = MAGIC + b"".join(_record(_SET, k, v) for k, v in self._data.items())
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(body)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(staging, self.path)  # others re-open it once they hold their lock

    # -- calls ----------------------------------------------------------------------------------

    def _call(self, op: str, key: object, exclusive: bool, work: Callable[[], T]) -> T:
        with self._lock:
            if self._closed:
                raise StoreUnavailable(f"file store {self.path}: {op} {key!r} after close")
            try:
                self._locked(exclusive)
                try:
                    self._replay()
                    done = work()
                    if exclusive:
                        self._maybe_compact()
                    return done
                finally:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
            except OSError as error:
                reason = errno.errorcode.get(error.errno or 0, "")
                raise StoreUnavailable(
                    f"file store {self.path}: {op} {key!r} failed: {error.strerror or reason}"
                ) from None

    def get(self, key: str) -> bytes | None:
        raw = key.encode("utf-8")
        return self._call("get", key, False, lambda: self._data.get(raw))

    def multi_get(self, keys: Sequence[str]) -> list[bytes | None]:
        raws = [k.encode("utf-8") for k in keys]
        return self._call("multi_get", list(keys), False, lambda: [self._data.get(r) for r in raws])

    def set(self, key: str, value: bytes) -> None:
        raw = key.encode("utf-8")
        self._call("set", key, True, lambda: self._write(raw, bytes(value)))

    def _write(self, raw: bytes, value: bytes) -> None:
        self._append(_record(_SET, raw, value))
        self._data[raw] = value

    def add(self, key: str, amount: int) -> int:
        raw = key.encode("utf-8")

        def work() -> int:
            current = self._data.get(raw, b"0")
            try:
                number = int(current.decode("ascii")) + int(amount)
            except (UnicodeDecodeError, ValueError):
                raise StoreCorrupt(key, "add on a key that is not a counter") from None
            self._write(raw, str(number).encode("ascii"))
            return number

        return self._call("add", key, True, work)

    def set_if_absent(self, key: str, value: bytes) -> tuple[bool, bytes]:
        raw, new = key.encode("utf-8"), bytes(value)

        def work() -> tuple[bool, bytes]:
            there = self._data.get(raw)
            if there is not None:
                return False, there
            self._write(raw, new)
            return True, new

        return self._call("set_if_absent", key, True, work)

    def compare_and_set(
        self, key: str, expected: bytes | None, value: bytes
    ) -> tuple[bool, bytes | None]:
        raw, new = key.encode("utf-8"), bytes(value)

        def work() -> tuple[bool, bytes | None]:
            current = self._data.get(raw)
            if current != expected:
                return False, current
            self._write(raw, new)
            return True, new

        return self._call("compare_and_set", key, True, work)

    def wait_for(self, keys: Sequence[str], timeout: float) -> bool:
        raws = [k.encode("utf-8") for k in keys]
        deadline = self._clock.now() + max(0.0, float(timeout) if timeout == timeout else 0.0)
        pause = _FIRST_POLL
        while True:
            present = self._call(
                "wait_for", list(keys), False, lambda: all(r in self._data for r in raws)
            )
            if present:
                return True
            left = deadline - self._clock.now()
            if left <= 0:
                return False
            self._clock.sleep(min(pause, left))
            pause = min(pause * 2, _LONGEST_POLL)

    def delete(self, key: str) -> None:
        raw = key.encode("utf-8")

        def work() -> None:
            if raw in self._data:
                self._append(_record(_DELETE, raw))
                del self._data[raw]

        self._call("delete", key, True, work)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                os.close(self._fd)
            except OSError:
                pass

    def __repr__(self) -> str:
        return f"LogFileStore({self.path}, closed={self._closed})"


__all__ = ["COMPACT_BYTES", "MAGIC", "LogFileStore"]
