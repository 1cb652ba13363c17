"""One node, real workers, real gloo: the environment contract, restarts and the budget."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e_helpers import WORKER, free_port, records, tprun

pytestmark = pytest.mark.slow


def test_env_contract_and_all_reduce_across_two_workers(out: Path) -> None:
    done = tprun("--standalone", "--nproc-per-node", "2", WORKER, "--out", str(out), "-x", "--y=1")
    assert done.returncode == 0, done.stderr
    seen = records(out)
    assert sorted(r["rank"] for r in seen) == [0, 1]
    for rec in seen:
        env = rec["env"]
        rank = str(rec["rank"])
        assert rec["sum"] == 3.0  # 1 + 2: the all_reduce crossed both workers
        assert rec["extra"] == ["-x", "--y=1"]  # script args with dashes pass through
        assert env["RANK"] == env["LOCAL_RANK"] == env["ROLE_RANK"] == rank
        assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == env["ROLE_WORLD_SIZE"] == "2"
        assert (env["GROUP_RANK"], env["GROUP_WORLD_SIZE"], env["ROLE_NAME"]) == (
            "0",
            "1",
            "default",
        )
        assert env["MASTER_ADDR"] == "127.0.0.1" and int(env["MASTER_PORT"]) > 0
        assert env["TPELASTIC_RESTART_COUNT"] == env["TORCHELASTIC_RESTART_COUNT"] == "0"
        assert env["TPELASTIC_MAX_RESTARTS"] == env["TORCHELASTIC_MAX_RESTARTS"] == "0"
        assert env["TPELASTIC_RUN_ID"] == env["TORCHELASTIC_RUN_ID"] != ""
        assert env["TPELASTIC_ROUND"] == "0"
        assert env["TPELASTIC_ERROR_FILE"] == env["TORCHELASTIC_ERROR_FILE"]
        assert env["TPELASTIC_ERROR_FILE"].endswith(f"/{rank}/error.json")


def test_python_m_tpelastic_run_is_the_same_command(out: Path) -> None:
    import subprocess
    import sys

    from e2e_helpers import launcher_env

    cmd = [sys.executable, "-m", "tpelastic.run", "--standalone", "--nproc_per_node=2"]
    done = subprocess.run(
        [*cmd, WORKER, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=90,
        env=launcher_env(),
    )
    assert done.returncode == 0, done.stderr
    assert len(records(out)) == 2


def test_kill_and_restart_loop_reinitialises_gloo_every_time(out: Path) -> None:
    # Each attempt one worker SIGKILLs itself after its all_reduce; the group restarts with a
    # fresh namespace. 4 in a row here (bench/restart_loop.py runs 50+).
    loops = 4
    done = tprun(
        "--standalone",
        "--nproc-per-node",
        "2",
        "--max-restarts",
        str(loops),
        WORKER,
        "--out",
        str(out),
        "--crash-until",
        str(loops),
        timeout=150,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = records(out)
    assert len(seen) == 2 * (loops + 1)  # every attempt's process group formed
    for attempt in range(loops + 1):
        mine = [r for r in seen if r["env"]["TPELASTIC_RESTART_COUNT"] == str(attempt)]
        assert sorted(r["rank"] for r in mine) == [0, 1], attempt
        assert all(r["sum"] == 3.0 for r in mine)
        assert len({r["env"]["MASTER_PORT"] for r in mine}) == 1


def test_budget_exhaustion_makes_exactly_max_restarts_plus_one_attempts(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    done = tprun(
        "--standalone",
        "--nproc-per-node",
        "2",
        "--max-restarts",
        "2",
        "--log-dir",
        str(logs),
        WORKER,
        "--out",
        str(tmp_path),
        "--fail-always",
    )
    assert done.returncode == 1
    assert len(list(logs.glob("*/attempt_*"))) == 3  # under the run's own folder
    assert "Root cause" in done.stderr
    assert "rank 1 broke on purpose (restart 2)" in done.stderr  # the error file's message
    assert "Traceback" in done.stderr  # the root cause's traceback from its error file


def test_static_backend_restarts_in_place_with_a_fresh_port(out: Path) -> None:
    # The static backend on one node (--master-port: its own loopback store at that port): its
    # one round restarts in place, rank 0 publishing a fresh bootstrap port for each attempt.
    done = tprun(
        "--master-port",
        str(free_port()),
        "--nproc-per-node",
        "2",
        "--max-restarts",
        "1",
        WORKER,
        "--out",
        str(out),
        "--crash-until",
        "1",
    )
    assert done.returncode == 0, done.stderr
    seen = records(out)
    assert sorted(r["env"]["TPELASTIC_RESTART_COUNT"] for r in seen) == ["0", "0", "1", "1"]
    assert {r["env"]["TPELASTIC_ROUND"] for r in seen} == {"0"}
    assert sorted(r["env"]["TPELASTIC_ATTEMPT"] for r in seen) == ["0", "0", "1", "1"]
    ports = {r["env"]["TPELASTIC_ATTEMPT"]: r["env"]["MASTER_PORT"] for r in seen}
    assert ports["0"] != ports["1"]


def test_flags_default_from_the_environment(out: Path) -> None:
    import subprocess

    from e2e_helpers import launcher_env, run_cmd

    env = {**launcher_env(), "PET_NPROC_PER_NODE": "2", "TPELASTIC_STANDALONE": "1"}
    done = subprocess.run(
        run_cmd(WORKER, "--out", str(out)), capture_output=True, text=True, timeout=90, env=env
    )
    assert done.returncode == 0, done.stderr
    assert sorted(r["rank"] for r in records(out)) == [0, 1]


@pytest.mark.parametrize("tee", ["0", "3"])
def test_local_ranks_filter_changes_the_console_only(out: Path, tmp_path: Path, tee: str) -> None:
    # As torchrun: ranks outside the filter reach no console; what goes to log files (--tee,
    # --redirects) is the same with or without the filter.
    logs = tmp_path / "logs"
    done = tprun(
        "--standalone",
        "--nproc-per-node",
        "2",
        "--local-ranks-filter",
        "1",
        "--tee",
        tee,
        "--log-dir",
        str(logs),
        WORKER,
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    assert "worker rank 0/2" not in done.stdout
    files = {p.parent.name: p.read_text() for p in logs.rglob("stdout.log")}
    if tee == "3":
        assert "[default1|rank1]:worker rank 1/2" in done.stdout
        assert "worker rank 0/2" in files["0"] and "worker rank 1/2" in files["1"]
    else:
        assert "worker rank 1/2" in done.stdout.splitlines()[0]  # inherited: no prefix
        assert files == {}
