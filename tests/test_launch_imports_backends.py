"""What an agent imports on the multi-node backends: no tensorplay (nor torch, numpy).

Not a timed test: it runs the real ``python -m tpelastic.run`` on the c10d, file, static and
etcd backends (real agent, real store, real worker processes) and lists the agent's
``sys.modules`` at exit, as tests/test_launch_imports.py does for ``--standalone``. Importing
tensorplay costs an agent ~0.2 s and ~80 MiB; our own server hosts the rendezvous store (or our
own file store holds it) and the workers' bootstrap store, and tensorplay's client in the
workers talks to it. Timings are in docs/benchmarks-launcher.md.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

HEAVY_IN_AGENT = ("tensorplay", "torch", "numpy", "transitions", "hypothesis")
# Without a run secret nothing is signed (hashlib loads OpenSSL: ~3.5 MiB), and an endpoint that
# is a loopback literal needs no interface list (psutil: ~2.5 MiB). etcd's HTTP client needs
# hashlib, so only the TCPStore path is held to these.
HEAVY_IN_A_TCP_AGENT = ("hashlib", "_hashlib", "hmac", "psutil")
# The agent's run folder (timer pipe, progress files) is made without tempfile, which brings
# shutil, random and the compressors: a few ms of every multi-node start.
HEAVY_IN_A_TCP_AGENT += ("tempfile", "shutil", "random", "bz2", "lzma")

WORKER = textwrap.dedent(
    """
    import json, os
    keys = ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE")
    with open(os.path.join(os.environ["OUT_DIR"], os.environ["LOCAL_RANK"]), "w") as out:
        json.dump({k: os.environ[k] for k in keys}, out)
    """
)

AGENT = textwrap.dedent(
    """
    import atexit, json, runpy, sys
    sys.argv = ["tpelastic.run", *sys.argv[1:]]
    # The launch ends in os._exit (cli.main.finish), after the atexit handlers: list from one.
    atexit.register(lambda: print("MODULES " + json.dumps(sorted(sys.modules))))
    runpy.run_module("tpelastic.run", run_name="__main__", alter_sys=True)
    """
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return [n for n in names if any(m == n or m.startswith(n + ".") for m in modules)]


def _launch(folder: Path, *rdzv: str) -> dict[str, object]:
    script = folder / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "OUT_DIR": str(folder), "TPELASTIC_LOG_LEVEL": "WARNING"}
    argv = ["--nnodes", "1", "--nproc-per-node", "2", "--rdzv-id", "imports", *rdzv, str(script)]
    done = subprocess.run(
        [sys.executable, "-c", AGENT, *argv], capture_output=True, text=True, env=env, timeout=90
    )
    line = [x for x in done.stdout.splitlines() if x.startswith("MODULES ")]
    assert line, done.stderr[-2000:]
    assert done.returncode == 0, done.stderr[-2000:]
    workers = [json.loads((folder / str(rank)).read_text()) for rank in (0, 1)]
    return {"agent": json.loads(line[0][len("MODULES ") :]), "workers": workers}


@pytest.fixture(scope="module")
def etcd_endpoint() -> Iterator[str]:
    if shutil.which("etcd") is None:
        pytest.skip("the etcd binary is not installed (.ci/run installs Debian's etcd-server)")
    fixtures = str(Path(__file__).parent / "adapters" / "stores")
    if fixtures not in sys.path:
        sys.path.insert(0, fixtures)
    from etcd_fixtures import etcd_cluster

    with etcd_cluster(1) as etcd:
        host, port = etcd.endpoints[0]
        yield f"{host}:{port}"


def _check(
    launch: dict[str, object],
    heavy: tuple[str, ...] = HEAVY_IN_AGENT,
    handler: str = "tpelastic.adapters.rendezvous.dynamic",
    agent_store: bool = True,
) -> None:
    agent = launch["agent"]
    assert isinstance(agent, list)
    assert handler in agent  # it did rendezvous for real
    assert _loaded(agent, heavy) == []
    workers = launch["workers"]
    assert isinstance(workers, list)
    # Rank 0's agent hosts the workers' bootstrap store: every worker is its client (fixed
    # membership gives rank 0's worker a fresh port per attempt instead).
    assert all(w["TORCHELASTIC_USE_AGENT_STORE"] == str(agent_store) for w in workers)
    assert len({w["MASTER_PORT"] for w in workers}) == 1


def test_a_c10d_agent_imports_no_tensorplay(tmp_path: Path) -> None:
    endpoint = f"127.0.0.1:{_free_port()}"
    launch = _launch(tmp_path, "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint)
    _check(launch, HEAVY_IN_AGENT + HEAVY_IN_A_TCP_AGENT)


def test_a_file_agent_imports_no_tensorplay(tmp_path: Path) -> None:
    endpoint = str(tmp_path / "rdzv" / "store")
    launch = _launch(tmp_path, "--rdzv-backend", "file", "--rdzv-endpoint", endpoint)
    _check(launch, HEAVY_IN_AGENT + HEAVY_IN_A_TCP_AGENT)


def test_a_static_agent_imports_no_tensorplay(tmp_path: Path) -> None:
    """torchrun's default backend (``--master-addr``/``--master-port``, no ``--rdzv-backend``):
    rank 0's agent hosts our server at the endpoint."""
    master = ("--master-addr", "127.0.0.1", "--master-port", str(_free_port()))
    launch = _launch(tmp_path, "--node-rank", "0", *master)
    static = "tpelastic.adapters.rendezvous.static"
    _check(launch, HEAVY_IN_AGENT + HEAVY_IN_A_TCP_AGENT, static, agent_store=False)


def test_an_etcd_agent_imports_no_tensorplay(tmp_path: Path, etcd_endpoint: str) -> None:
    _check(_launch(tmp_path, "--rdzv-backend", "etcd", "--rdzv-endpoint", etcd_endpoint))


def test_store_type_tensorplay_still_hosts_with_tensorplays_server(tmp_path: Path) -> None:
    endpoint = f"127.0.0.1:{_free_port()}"
    rdzv = ("--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint)
    launch = _launch(tmp_path, *rdzv, "--rdzv-conf", "store_type=tensorplay")
    agent = launch["agent"]
    assert isinstance(agent, list) and "tensorplay" in agent
    workers = launch["workers"]
    assert isinstance(workers, list)
    assert all(w["TORCHELASTIC_USE_AGENT_STORE"] == "True" for w in workers)
