"""torchrun's own command lines, run for real: the static multi-node form with
``--master-addr/--master-port``, ``PET_NNODES``, and ``c10d`` with no endpoint."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from e2e_helpers import WORKER, finish, free_port, launcher_env, records, run_cmd, tpstart

pytestmark = pytest.mark.slow


def _static_node(rank: int, port: int, out: Path, log: Path) -> subprocess.Popen[bytes]:
    return tpstart(
        "--nnodes",
        "2",
        "--node-rank",
        str(rank),
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(port),
        WORKER,
        "--out",
        str(out),
        log=log,
    )


def test_static_two_nodes_meet_at_master_addr_and_port(tmp_path: Path, out: Path) -> None:
    port = free_port()
    nodes = [_static_node(rank, port, out, tmp_path / f"node{rank}.log") for rank in (0, 1)]
    codes = [finish(node, tmp_path / f"node{rank}.log") for rank, node in enumerate(nodes)]
    logs = [(tmp_path / f"node{rank}.log").read_text() for rank in (0, 1)]
    assert codes == [0, 0], logs
    seen = records(out)
    assert sorted(r["rank"] for r in seen) == [0, 1, 2, 3]
    assert {r["env"]["WORLD_SIZE"] for r in seen} == {"4"}
    by_node = {r["rank"]: r["env"]["GROUP_RANK"] for r in seen}
    assert by_node == {0: "0", 1: "0", 2: "1", 3: "1"}  # --node-rank decides the ranks
    # The workers' bootstrap store is rank 0's fresh port, not the rendezvous store's.
    assert {r["env"]["MASTER_PORT"] for r in seen} != {str(port)}


def test_pet_nnodes_is_the_static_multi_node_form(tmp_path: Path, out: Path) -> None:
    port = free_port()
    nodes = []
    for rank in (0, 1):
        env = {**launcher_env(), "PET_NNODES": "2", "PET_NODE_RANK": str(rank)}
        env["PET_MASTER_PORT"] = str(port)
        with open(tmp_path / f"node{rank}.log", "wb") as log:
            nodes.append(
                subprocess.Popen(
                    run_cmd(WORKER, "--out", str(out)), stdout=log, stderr=log, env=env
                )
            )
    codes = [finish(node, tmp_path / f"node{rank}.log") for rank, node in enumerate(nodes)]
    assert codes == [0, 0], [(tmp_path / f"node{r}.log").read_text() for r in (0, 1)]
    assert sorted(r["rank"] for r in records(out)) == [0, 1]


def test_c10d_with_no_endpoint_hosts_on_localhost_29400(tmp_path: Path, out: Path) -> None:
    # torchrun's default c10d port; skipped when something on this machine holds it.
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", 29400))
        except OSError:
            pytest.skip("port 29400 is in use on this machine")
    log = tmp_path / "node.log"
    node = tpstart("--rdzv-backend", "c10d", WORKER, "--out", str(out), "--hold", "3", log=log)
    agent = psutil.Process(node.pid)
    deadline = time.monotonic() + 60
    listening: set[int] = set()
    while 29400 not in listening and node.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(psutil.Error):
            listening = {c.laddr.port for c in agent.net_connections() if c.status == "LISTEN"}
        time.sleep(0.05)
    assert finish(node, log) == 0, log.read_text()
    assert 29400 in listening
    assert len(records(out)) == 1


def test_a_job_without_log_dir_leaves_no_folder_behind(tmp_path: Path, out: Path) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**launcher_env(), "TMPDIR": str(temp)}
    for argv in (["--standalone", "--nproc-per-node", "2"], ["--nproc-per-node", "1"]):
        done = subprocess.run(
            run_cmd(*argv, WORKER, "--out", str(out)), capture_output=True, env=env, timeout=90
        )
        assert done.returncode == 0, done.stderr[-2000:]
    assert os.listdir(temp) == []


def test_a_second_run_into_the_same_log_dir_gets_its_own_folder(tmp_path: Path, out: Path) -> None:
    logs = tmp_path / "logs"
    for _ in range(2):
        log = tmp_path / "node.log"
        node = tpstart("--standalone", "--log-dir", str(logs), "--tee", "3", WORKER, "--out",
                       str(out), log=log)  # fmt: skip
        assert finish(node, log) == 0, log.read_text()
    runs = sorted(logs.iterdir())
    assert len(runs) == 2 and all(
        len(list(run.glob("attempt_*/0/stdout.log"))) == 1 for run in runs
    )


def test_tensorplay_s_record_traceback_is_in_the_failure_summary(tmp_path: Path) -> None:
    script = str(Path(WORKER).parent / "tp_record.py")
    log = tmp_path / "node.log"
    # Worker output to files only: a traceback on the console comes from the failure summary.
    node = tpstart(
        "--standalone", "--redirects", "3", "--log-dir", str(tmp_path / "logs"), script, log=log
    )
    assert finish(node, log) == 1
    text = log.read_text()
    assert "tensorplay-recorded failure" in text
    assert "Traceback (most recent call last)" in text and "tp_record.py" in text, text


def test_local_rank_in_the_worker_s_arguments_is_substituted(tmp_path: Path) -> None:
    out = tmp_path / "args"
    out.mkdir()
    code = "import sys; open(sys.argv[1], 'w').write(sys.argv[2])"
    log = tmp_path / "node.log"
    node = tpstart(
        "--standalone", "--nproc-per-node", "2", "--no-python", sys.executable, "-c", code,
        str(out / "r${local_rank}"), "rank=$local_rank cost=$5", log=log,
    )  # fmt: skip
    assert finish(node, log) == 0, log.read_text()
    assert {p.name: p.read_text() for p in out.iterdir()} == {
        "r0": "rank=0 cost=$5",
        "r1": "rank=1 cost=$5",
    }
