"""The agent's end of the in-process control channel on a real unix socket."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest

from tpelastic.adapters.workers.control import ControlChannels


def test_a_long_tmpdir_still_gives_sockets_that_bind_and_carry_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A $TMPDIR too long for a unix socket's path (pytest's own, nested) is passed over for
    /tmp: the channel binds, a worker's line reaches the agent, and the folder goes on close."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(deep))
    seen: list[tuple[int, dict[str, object]]] = []
    channels = ControlChannels(2, lambda rank, message: seen.append((rank, message)))
    try:
        path = channels.path(1)
        assert len(os.fsencode(path)) < 108 and path.startswith("/tmp/")
        assert channels.env(1, 3)["TPELASTIC_CONTROL_START"] == "3"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as worker:
            worker.connect(path)
            worker.sendall(json.dumps({"op": "hello", "start": 3}).encode() + b"\n")
            deadline = time.monotonic() + 10
            while not seen and time.monotonic() < deadline:
                time.sleep(0.01)
        assert seen and seen[0][0] == 1 and seen[0][1]["op"] == "hello"
    finally:
        channels.close()
    assert not os.path.exists(os.path.dirname(path))
