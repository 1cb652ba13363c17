"""Every bad input is one line naming the problem, exit code 2, within seconds, no traceback."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from e2e_helpers import WORKER, tprun

BAD = [
    (["missing_script.py"], "script 'missing_script.py' does not exist"),
    (["--nproc-per-node", "0", WORKER], "--nproc-per-node must be >= 1, got 0"),
    (["--nproc-per-node", "-3", WORKER], "--nproc-per-node must be >= 1, got -3"),
    (["--nproc-per-node", "two", WORKER], "must be an integer, auto, cpu, gpu or xpu"),
    (["--nnodes", "3:2", WORKER], "MIN (3) is greater than MAX (2)"),
    (["--nnodes", "x", WORKER], "--nnodes must be an integer"),
    (["--rdzv-backend", "tcp", "--rdzv-endpoint", "host:port", WORKER], "port 'port' is not"),
    (["--rdzv-backend", "tcp", "--rdzv-endpoint", ":29400", WORKER], "has no host"),
    (["--rdzv-backend", "nope", "--rdzv-endpoint", "127.0.0.1:1", WORKER], "unknown rendezvous"),
    (["--max-restarts", "-1", WORKER], "--max-restarts must be >= 0"),
    (["--monitor-interval", "0", WORKER], "--monitor-interval must be a positive"),
    (["--master-port", "x1", WORKER], "--master-port must be an integer"),
    (["--rdzv-conf", "join_timeout", WORKER], "is not key=value"),
    (["--start-method", "teleport", WORKER], "start_method must be one of"),
    (["--no-python", "no-such-program-here"], "was not found"),
    ([], "the following arguments are required"),
]


@pytest.mark.parametrize(("args", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    started = time.monotonic()
    done = tprun(*args, timeout=30)
    assert time.monotonic() - started < 10
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("tpelastic run: error: ")
    assert message in lines[0]


@pytest.mark.parametrize("flag", ["--master-port", "--rdzv-endpoint"])
def test_a_port_held_by_another_program_is_a_usage_error(flag: str, tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        value = str(port) if flag == "--master-port" else f"127.0.0.1:{port}"
        done = tprun(flag, value, WORKER, "--out", str(tmp_path), timeout=30)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{port} is already in use" in lines[0], done.stderr
