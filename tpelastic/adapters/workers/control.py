"""The local control channel between the agent and its workers: one unix socket per local rank.

The agent listens on ``<dir>/<local_rank>.sock`` (a private folder it made) and passes the
path in the worker's environment (:data:`CONTROL_ENV`), with the id of the start the worker
belongs to (:data:`START_ENV`). A worker that runs ``tpelastic.worker.run`` connects and says
``hello``; one that does not never connects, and nothing changes for it. Messages are one JSON
object per line, each with its ``op``:

* worker -> agent: ``hello`` (``start``, ``pid``), ``raised`` (``start``, ``reason``: the
  training function raised), ``stopped`` (``start``: training stopped, process group gone),
  ``started`` (``start``: re-initialised), ``reinit_failed`` (``start``, ``reason``); the
  agent's end reports a closed connection as ``closed`` (no ``start``);
* agent -> worker: ``stop`` (``start``: the id of the start that will follow), ``start``
  (``start``, ``env``: the new world's variables).

A newer connection on a rank's socket replaces the older (a respawned worker). The agent's
side only carries messages: what they mean is decided by the core (``core/in_process.py``).
"""

from __future__ import annotations

import json
import logging
import os
import selectors
import socket
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("tpelastic.agent")

CONTROL_ENV = "TPELASTIC_CONTROL"
"""The path of this worker's control socket."""
START_ENV = "TPELASTIC_CONTROL_START"
"""The id of the start this worker's process belongs to (echoed in its messages)."""
OFF_ENV = "TPELASTIC_IN_PROCESS"
"""``0`` turns the channel off: every restart is a full one."""


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def enabled(environ: dict[str, str] | None = None) -> bool:
    return (os.environ if environ is None else environ).get(OFF_ENV, "1") != "0"


# A unix socket's path must fit in sun_path (108 bytes on Linux, with its NUL).
_SOCKET_PATH_MAX = 100


def _private_dir() -> str:
    """A new folder only this user can enter (``tempfile`` would import shutil, random and
    compression modules into the agent for this alone), under ``$TMPDIR``, or under ``/tmp``
    when a socket path there would be too long for a unix socket."""
    base = os.environ.get("TMPDIR") or "/tmp"
    longest = os.path.join(base, "tpelastic-control-" + "0" * 12, "99999.sock")
    if len(os.fsencode(longest)) > _SOCKET_PATH_MAX:
        base = "/tmp"
    while True:
        path = os.path.join(base, f"tpelastic-control-{os.urandom(6).hex()}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path


class ControlChannels:
    """The agent's end: a listening socket per local rank, served by one daemon thread.

    Args:
        local_world_size: how many sockets.
        on_message: called on the serving thread with ``(local_rank, message)`` for every
            well-formed line a worker sends.
    """

    def __init__(
        self, local_world_size: int, on_message: Callable[[int, dict[str, Any]], None]
    ) -> None:
        self._on_message = on_message
        self._dir = _private_dir()
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._conns: dict[int, socket.socket] = {}
        self._buffers: dict[socket.socket, bytes] = {}
        self._listeners: dict[int, socket.socket] = {}
        for rank in range(local_world_size):
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(self.path(rank))
            listener.listen(4)
            listener.setblocking(False)
            self._listeners[rank] = listener
            self._selector.register(listener, selectors.EVENT_READ, ("listen", rank))
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ, ("wake", -1))
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="tpelastic-control", daemon=True)
        self._thread.start()

    def path(self, local_rank: int) -> str:
        return os.path.join(self._dir, f"{local_rank}.sock")

    def env(self, local_rank: int, start: int) -> dict[str, str]:
        """The variables that tell the worker of ``local_rank`` where its channel is."""
        return {CONTROL_ENV: self.path(local_rank), START_ENV: str(start)}

    def send(self, local_rank: int, message: dict[str, Any]) -> bool:
        """Send ``message`` to the worker of ``local_rank``; False when it is not connected or
        the send failed (the core's deadline then decides)."""
        with self._lock:
            conn = self._conns.get(local_rank)
        if conn is None:
            return False
        try:
            conn.sendall(encode(message))
        except OSError:
            return False
        return True

    def _serve(self) -> None:
        while not self._closed:
            for key, _ in self._selector.select(timeout=1.0):
                kind, rank = key.data
                if kind == "wake":
                    return
                if kind == "listen":
                    self._accept(rank)
                else:
                    self._read(key.fileobj, rank)  # type: ignore[arg-type]

    def _accept(self, rank: int) -> None:
        try:
            conn, _ = self._listeners[rank].accept()
        except OSError:
            return
        conn.setblocking(True)
        with self._lock:
            old = self._conns.get(rank)
            self._conns[rank] = conn
        if old is not None:
            self._drop(old)
        self._buffers[conn] = b""
        self._selector.register(conn, selectors.EVENT_READ, ("conn", rank))

    def _drop(self, conn: socket.socket) -> None:
        try:
            self._selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        self._buffers.pop(conn, None)
        conn.close()

    def _read(self, conn: socket.socket, rank: int) -> None:
        try:
            data = conn.recv(65536)
        except OSError:
            data = b""
        if not data:  # the worker's process ended or closed its end
            with self._lock:
                current = self._conns.get(rank) is conn
                if current:
                    del self._conns[rank]
            self._drop(conn)
            if current:
                self._on_message(rank, {"op": "closed"})
            return
        lines = (self._buffers.get(conn, b"") + data).split(b"\n")
        self._buffers[conn] = lines.pop()
        for line in lines:
            try:
                message = json.loads(line)
            except ValueError:
                log.warning("control channel of local rank %d: not a message: %r", rank, line)
                continue
            if isinstance(message, dict) and isinstance(message.get("op"), str):
                self._on_message(rank, message)

    def close(self) -> None:
        """Stop serving and remove the sockets; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._wake_w.send(b"x")
        self._thread.join(timeout=2.0)
        with self._lock:
            conns, self._conns = list(self._conns.values()), {}
        for sock in [*conns, *self._listeners.values(), self._wake_r, self._wake_w]:
            sock.close()
        for rank in self._listeners:
            try:
                os.unlink(self.path(rank))
            except OSError:
                pass
        try:
            os.rmdir(self._dir)
        except OSError:
            pass


__all__ = ["CONTROL_ENV", "OFF_ENV", "START_ENV", "ControlChannels", "enabled", "encode"]
