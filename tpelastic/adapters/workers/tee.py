"""Copying a worker's output stream to its log file and, prefixed, to the agent's console.

Each teed stream is a pipe read by one thread. Bytes go to the log file as they arrive (so the
file is exact, partial lines included) and complete lines go to the console with the worker's
prefix, in order. All pumps share one lock around console writes, so a line is never cut into by
another worker's line. A partial last line is flushed, with a newline, when the stream ends.
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


class StreamPump:
    """Reads one pipe until end-of-file, copying to a file and/or the console.

    Args:
        read_fd: the pipe's read end; the pump owns it and closes it at end-of-file.
        log_file: an open binary file for the raw bytes, or None.
        console_fd: the agent's stdout or stderr fd for prefixed lines, or None.
        prefix: the text put before every console line.
    """

    def __init__(
        self, read_fd: int, log_file: BinaryIO | None, console_fd: int | None, prefix: str
    ) -> None:
        self._fd = read_fd
        self._log = log_file
        self._console = console_fd
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
        if self._console is None:
            return
        data = self._pending + chunk
        cut = data.rfind(b"\n") + 1
        self._pending = data[cut:]
        if cut:
            self._emit(data[:cut].splitlines(keepends=True))

    def _emit(self, lines: list[bytes]) -> None:
        if self._console is None:
            return
        text = b"".join(self._prefix + line for line in lines)
        with _CONSOLE_LOCK:
            _write_all(self._console, text)


__all__ = ["StreamPump", "console_fd", "line_prefix"]
