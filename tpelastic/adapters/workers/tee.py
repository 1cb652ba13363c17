"""Copying a worker's output stream to its log file and, prefixed, to the agent's console.

Each teed stream is a pipe read by one thread. Bytes go to the log file as they arrive (so the
file is exact, partial lines included) and complete lines go to the console with the worker's
prefix, in order. All pumps share one lock around console writes, so a line is never cut into by
another worker's line. A partial last line is flushed, with a newline, when the stream ends.
Lines that hold one of the duplicate filters are also written, prefixed, to a shared file
(torchrun's ``--duplicate-stdout-filters``), whether or not the console shows them.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, BinaryIO

_CONSOLE_LOCK = threading.Lock()
_CHUNK = 65536


def line_prefix(role: str, local_rank: int, rank: int | None) -> str:
    """``[trainer0]:`` or, when the global rank is known, ``[trainer0|rank3]:``."""
    if rank is None:
        return f"[{role}{local_rank}]:"
    return f"[{role}{local_rank}|rank{rank}]:"


def console_fd(stream: Any) -> int:
    """The fd behind ``sys.stdout``/``sys.stderr``; 1 or 2 when it has none (captured)."""
    try:
        return int(stream.fileno())
    except (AttributeError, ValueError, OSError):
        return 2 if stream is sys.stderr else 1


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class LineCopy:
    """One attempt's file of teed lines that hold any of ``filters`` (a substring match, as
    torch's); shared by that stream's pumps, one line at a time."""

    def __init__(self, path: str, filters: list[str]) -> None:
        self._needles = [f.encode() for f in filters]
        self._lock = threading.Lock()
        self._file: BinaryIO | None = open(path, "ab")

    def write(self, prefix: bytes, lines: list[bytes]) -> None:
        """Append the prefixed ``lines`` that match a filter."""
        kept = [prefix + line for line in lines if any(n in line for n in self._needles)]
        if not kept:
            return
        with self._lock:
            if self._file is not None:
                self._file.write(b"".join(kept))
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


class StreamPump:
    """Reads one pipe until end-of-file, copying to a file and/or the console.

    Args:
        read_fd: the pipe's read end; the pump owns it and closes it at end-of-file.
        log_file: an open binary file for the raw bytes, or None.
        console_fd: the agent's stdout or stderr fd for prefixed lines, or None.
        prefix: the text put before every console line.
        copy: where lines matching the duplicate filters also go, or None.
    """

    def __init__(
        self,
        read_fd: int,
        log_file: BinaryIO | None,
        console_fd: int | None,
        prefix: str,
        copy: LineCopy | None = None,
    ) -> None:
        self._fd = read_fd
        self._log = log_file
        self._console = console_fd
        self._copy = copy
        self._prefix = prefix.encode()
        self._pending = b""
        self._thread = threading.Thread(target=self._run, name=f"tee{prefix}", daemon=True)

    def start(self) -> StreamPump:
        """Start the reading thread; returns self."""
        self._thread.start()
        return self

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for end-of-file; True when the pump finished."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        try:
            while True:
                chunk = os.read(self._fd, _CHUNK)
                if not chunk:
                    break
                self._handle(chunk)
            if self._pending:
                self._emit([self._pending + b"\n"])
        except OSError:
            pass  # the console or file went away; the worker's fate is decided elsewhere
        finally:
            os.close(self._fd)
            if self._log is not None:
                self._log.close()

    def _handle(self, chunk: bytes) -> None:
        if self._log is not None:
            self._log.write(chunk)
            self._log.flush()
        if self._console is None and self._copy is None:
            return
        data = self._pending + chunk
        cut = data.rfind(b"\n") + 1
        self._pending = data[cut:]
        if cut:
            self._emit(data[:cut].splitlines(keepends=True))

    def _emit(self, lines: list[bytes]) -> None:
        if self._copy is not None:
            self._copy.write(self._prefix, lines)
        if self._console is None:
            return
        text = b"".join(self._prefix + line for line in lines)
        with _CONSOLE_LOCK:
            _write_all(self._console, text)


__all__ = ["LineCopy", "StreamPump", "console_fd", "line_prefix"]
