"""The Python API: elastic_launch with a callable, launch_agent failures, the demo job."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e_helpers import REPO, free_port, rank_times, tprun

from tpelastic.launcher import ConfigError, LaunchConfig, elastic_launch

pytestmark = pytest.mark.slow


def config(**extra: object) -> LaunchConfig:
    return LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=2,
        rdzv_backend="tcp",
        rdzv_endpoint=f"127.0.0.1:{free_port()}",
        run_id="api",
        local_addr="127.0.0.1",
        **extra,  # type: ignore[arg-type]
    )


def test_elastic_launch_returns_each_ranks_return_value() -> None:
    assert elastic_launch(config(), rank_times)(10) == {0: (0, 0), 1: (1, 10)}


def test_launch_config_names_the_bad_setting() -> None:
    with pytest.raises(ConfigError, match="nproc_per_node must be an integer >= 1, got 0"):
        LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=0)
    with pytest.raises(ConfigError, match="MIN must not be greater than MAX"):
        LaunchConfig(min_nodes=3, max_nodes=2, nproc_per_node=1)


def test_demo_job_resumes_from_its_checkpoint_after_a_failure(tmp_path: Path) -> None:
    done = tprun(
        "--standalone",
        "--nproc-per-node",
        "2",
        "--max-restarts",
        "1",
        str(REPO / "examples" / "train_elastic.py"),
        "--ckpt-dir",
        str(tmp_path),
        "--epochs",
        "1",
        "--samples",
        "512",
        "--step-delay",
        "0",
        "--ckpt-every",
        "2",
        "--crash-once-at",
        "5",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "restart 1: starting from checkpoint: epoch 0, sample 256, step 4" in done.stdout
    assert "[train] done: 8 steps" in done.stdout
    assert "simulated failure of rank 1 at step 5" in done.stderr
