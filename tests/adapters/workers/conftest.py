"""Fixtures for the worker-process tests: script paths, pid files, and a no-survivors check."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")


def script(name: str) -> str:
    return os.path.join(SCRIPTS, name)


def read_pids(folder: str, name: str, timeout: float = 10.0) -> list[int]:
    """Wait for ``folder/name`` (written atomically by a script) and return its pids."""
    path = os.path.join(folder, name)
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.01)
    with open(path) as src:
        return [int(p) for p in src.read().split()]


def alive(pids: list[int]) -> list[int]:
    """The pids that still run (zombies count as gone)."""
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            continue
    return out


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return alive(pids)


@pytest.fixture
def pid_dir(tmp_path) -> Iterator[str]:
    folder = tmp_path / "pids"
    folder.mkdir()
    yield str(folder)


@pytest.fixture
def env_python() -> dict[str, str]:
    return {"PYTHON": sys.executable}
