"""Bad command lines for ``tpelastic run``: one line, exit 2, at once, before anything starts.

Hypothesis puts one bad piece (a malformed or unreachable endpoint, a number out of range, a
bad log folder, redirect spec, signal name, ...) among good flags in any order, and runs the
real ``cli.run.main`` in this process: no traceback, exit 2, one line ``tpelastic run: error:
...`` within 2 s; where a store connection is tried, within 1 s plus the join timeout, after one
line saying what is tried and for how long. A sample runs as real ``tpelastic run`` processes.
Only 127.0.0.0/8 is ever connected to (an unreachable store is 127.0.0.2 with is_host=false).
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tpelastic.adapters.launcher.launch  # imported once, not timed per line
import tpelastic.rendezvous  # noqa: F401
from tpelastic.cli import run

REPO = Path(__file__).resolve().parents[2]
SCRIPT = str(REPO / "tests" / "e2e" / "scripts" / "worker.py")
A_FILE = str(REPO / "pyproject.toml")  # a file where a folder is wanted
JOIN = 0.5  # the join timeout of the lines that try a connection

# Bad pieces: argv fragments, each of which alone makes a line bad.
ENDPOINTS = [
    "::::",
    "[::1",
    "[::1]x",
    "host:99999",
    ":29400",
    "http://127.0.0.1:{port}",
    "256.256.256.256:{port}",
    "1.2.3.4.5:{port}",
    "a..b:{port}",
    "-bad-:{port}",
    "under score:{port}",
    "127.0.0.1:-1",
    "127.0.0.1:port",
    "[1::2::3]:{port}",
]
NUMBERS = [
    ("--monitor-interval", ["1e308", "inf", "nan", "-1", "0", "abc", "1e400"]),
    ("--max-restarts", ["-1", "x", "99999999999", "1.5"]),
    ("--nproc-per-node", ["0", "-1", "1000000000", "x", "gpu", "2.5"]),
    ("--nnodes", ["0", "3:2", "x", "1:2:3", ":", "0:0"]),
    ("--master-port", ["0", "70000", "x", "-5"]),
    ("--shutdown-timeout", ["-1", "x", "1e99", "1.5", "99999999999"]),
    ("--exit-barrier-timeout", ["0", "1e308", "-3", "x"]),
    ("--rdzv-timeout", ["0", "-5", "1e400", "x"]),
    ("--stall-timeout", ["0", "-1", "1e308"]),
    ("--stall-first-step-timeout", ["0", "nan"]),
    ("--metrics-port", ["0", "70000", "x", "[::1]"]),
    ("--health-port", ["70000", "y"]),
]
CONF = [
    "read_timeout=1e12",
    "keep_alive_interval=1e300",
    "join_timeout=-1",
    "last_call_timeout=nan",
    "keep_alive_max_attempt=0",
    "join_timeout",
    "=x",
    "store_type=bogus",
    "is_host=maybe",
    "heartbeat=0",
    "close_timeout=1e9",
]
OTHER = [
    ["--log-dir", A_FILE],
    ["--log-dir", A_FILE + "/below"],
    ["--redirects", "9"],
    ["--redirects", "x"],
    ["--redirects", "0:9"],
    ["--redirects", "0:1,0:2"],
    ["--tee", "4"],
    ["--tee", "a:b"],
    ["--signals-to-handle", "SIGFOO"],
    ["--signals-to-handle", "SIGKILL"],
    ["--signals-to-handle", ""],
    ["--signals-to-handle", "SIG_DFL"],
    ["--event-log-handler", "bogus"],
    ["--numa-binding", "bogus"],
    ["--logs-specs", "nope"],
    ["--start-method", "teleport"],
    ["--no-python", "-m"],
    ["--local-ranks-filter", "a"],
    ["--local-ranks-filter", "-1"],
    ["--events", "bogus"],
    ["--events", "console", "--events-file", "x.jsonl"],
    ["--metrics", "somewhere"],
    ["--nnodes", "2", "--node-rank", "5"],
    ["--nnodes", "2", "--node-rank", "-1"],
    ["--nnodes", "2", "--master-addr", "300.1.1.1"],
    ["--nnodes", "2", "--master-addr", "http://h"],
    ["--rdzv-backend", "file", "--rdzv-endpoint", "127.0.0.1:21101"],
    ["--rdzv-backend", "nope", "--rdzv-endpoint", "127.0.0.1:1"],
    ["--no-such-flag", "1"],
    ["--nproc-per-node"],
]
GOOD = [
    ["--nproc-per-node", "2"],
    ["--max-restarts", "1"],
    ["--role", "trainer"],
    ["--monitor-interval", "0.5"],
    ["--redirects", "1"],
    ["--start-method", "fork"],
    ["--rdzv-id", "job"],
    ["--shutdown-timeout", "5"],
    ["--local-ranks-filter", "0"],
]


@st.composite
def bad_lines(draw: st.DrawFn) -> tuple[list[str], dict[str, str], bool]:
    """(argv, extra environment, whether a store connection is tried)."""
    port = draw(st.integers(1, 65535))
    kind = draw(st.sampled_from(["endpoint", "unreachable", "number", "conf", "other", "env"]))
    env: dict[str, str] = {}
    connects = False
    if kind == "endpoint":
        backend = draw(st.sampled_from(["c10d", "tcp", "static", "etcd", "etcd-v2"]))
        endpoint = draw(st.sampled_from(ENDPOINTS)).format(port=port)
        bad = ["--rdzv-backend", backend, f"--rdzv-endpoint={endpoint}"]
    elif kind == "unreachable":
        # A store nobody hosts, on loopback only; tried for the join timeout, then exit 2.
        connects = True
        if draw(st.booleans()):
            bad = ["--rdzv-backend", draw(st.sampled_from(["c10d", "tcp", "etcd"]))]
            bad += ["--rdzv-endpoint", f"127.0.0.2:{port}"]
            bad += ["--rdzv-conf", f"is_host=false,join_timeout={JOIN}"]
        else:
            bad = ["--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.2"]
            bad += ["--master-port", str(port), "--rdzv-conf", f"timeout={JOIN}"]
    elif kind == "number":
        flag, values = draw(st.sampled_from(NUMBERS))
        bad = [flag, draw(st.sampled_from(values))]
    elif kind == "conf":
        bad = ["--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:1"]
        bad += ["--rdzv-conf", draw(st.sampled_from(CONF))]
    elif kind == "other":
        bad = list(draw(st.sampled_from(OTHER)))
    else:
        name = draw(st.sampled_from(["PET_STANDALONE", "PET_VIRTUAL_LOCAL_RANK", "PET_MODULE"]))
        env[name] = draw(st.sampled_from(["yes", "x", "1.5", ""]))
        bad = []
    good = [g for g in GOOD if g[0] not in bad]  # a later good value would win over the bad
    pieces = [bad, *draw(st.lists(st.sampled_from(good), max_size=3))]
    order = draw(st.permutations(range(len(pieces))))
    argv = [arg for i in order for arg in pieces[i]]
    script = [] if bad == ["--nproc-per-node"] else [SCRIPT]
    if kind == "env" and not env[name]:
        env[name] = "nope"
    return [*argv, *script, "--out", "/nonexistent"], env, connects


@contextlib.contextmanager
def environment(extra: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    for key in list(os.environ):
        if key.startswith(("PET_", "TPELASTIC_")):
            del os.environ[key]
    os.environ.update(extra)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


class Hung(Exception):
    pass


def _alarm(_signum: int, _frame: object) -> None:
    raise Hung()


def check_refused(stderr: str, code: int, took: float, connects: bool, argv: list[str]) -> None:
    assert "Traceback" not in stderr, (argv, stderr)
    assert code == 2, (argv, code, stderr)
    lines = stderr.strip().splitlines()
    if connects:
        assert took < 1.0 + JOIN + 1.0, (argv, took)  # 1 s + the join timeout (+ load)
        assert len(lines) == 2 and "trying for up to" in lines[0], (argv, stderr)
        lines = lines[1:]
    else:
        assert took < 2.0, (argv, took)
    assert len(lines) == 1 and lines[0].startswith("tpelastic run: error: "), (argv, stderr)


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(line=bad_lines())
def test_a_bad_line_is_one_line_exit_2_at_once(line) -> None:
    argv, env, connects = line
    err = io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(30)  # a line that starts a job or hangs fails here instead of blocking
    started = time.monotonic()
    try:
        with environment(env), contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):
            try:
                code = run.main(argv)
            except SystemExit as leaving:  # argparse's own exit (it never should for these)
                code = leaving.code  # type: ignore[assignment]
    except Hung:
        pytest.fail(f"still running after 30 s: {argv} {env}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    check_refused(err.getvalue(), int(code or 0), time.monotonic() - started, connects, argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["--rdzv-backend", "c10d", "--rdzv-endpoint", "::::"],
        ["--rdzv-backend", "c10d", "--rdzv-endpoint", "[::1"],
        ["--rdzv-backend", "c10d", "--rdzv-endpoint", "host:99999"],
        ["--rdzv-backend", "c10d", "--rdzv-endpoint", ":29400"],
        ["--rdzv-backend", "c10d", "--rdzv-endpoint", "http://127.0.0.1:1234"],
        ["--rdzv-backend", "c10d", "--rdzv-endpoint", "256.256.256.256:1234"],
        ["--monitor-interval", "1e308"],
        [
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            "127.0.0.1:1",
            "--rdzv-conf",
            "read_timeout=1e12",
        ],  # fmt: skip
        ["--rdzv-conf", "keep_alive_interval=1e300"],
        ["--nproc-per-node", "1000000000"],
        ["--log-dir", A_FILE],
        ["--redirects", "9:x"],
        [
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            "127.0.0.1:21101",
            "--rdzv-conf",
            "store_type=file",
        ],  # fmt: skip
    ],
)
def test_the_issue_s_bad_lines_as_real_processes(argv: list[str], tmp_path: Path) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tpelastic", "run", *argv, SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    took = time.monotonic() - started
    assert "Traceback" not in done.stderr and done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tpelastic run: error: "), done.stderr
    assert took < 10, took  # the interpreter's own start included, on a loaded machine
    assert os.listdir(tmp_path) == []  # no file named after an endpoint, nothing else


@pytest.fixture(params=["closes", "answers-http", "never-answers"])
def not_a_store(request: pytest.FixtureRequest) -> Iterator[int]:
    """A port that accepts connections but is no TCPStore."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            if request.param == "closes":
                conn.close()
            elif request.param == "answers-http":
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
                conn.close()
            else:
                held.append(conn)

    threading.Thread(target=serve, daemon=True).start()
    yield int(server.getsockname()[1])
    server.close()
    for conn in held:
        conn.close()


@pytest.mark.parametrize("backend", ["c10d", "static"])
def test_a_port_that_is_not_a_store_is_refused_within_the_join_timeout(
    not_a_store: int, backend: str
) -> None:
    argv = ["--rdzv-backend", backend, "--rdzv-endpoint", f"127.0.0.1:{not_a_store}"]
    if backend == "static":
        argv += ["--nnodes", "2", "--node-rank", "1", "--rdzv-conf", f"timeout={JOIN}"]
    else:
        argv += ["--rdzv-conf", f"is_host=false,join_timeout={JOIN}"]
    err = io.StringIO()
    started = time.monotonic()
    with environment({}), contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):
        code = run.main([*argv, SCRIPT, "--out", "/nonexistent"])
    took = time.monotonic() - started
    assert "Traceback" not in err.getvalue() and code == 2, err.getvalue()
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and "did not answer as a TCPStore" in lines[0], lines
    assert took < 1.0 + JOIN + 2.0, took
