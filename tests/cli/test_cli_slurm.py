"""Inside a Slurm allocation of several nodes, ``tpelastic run`` reads the node count, this
node's rank and the rendezvous endpoint (the first host) from Slurm's variables; flags and
TPELASTIC_/PET_ variables still win."""

from __future__ import annotations

import pytest

from tpelastic.cli.run import config_from_args, parse_args
from tpelastic.cli.slurm import first_host, slurm_defaults

SLURM = {
    "SLURM_JOB_ID": "4242",
    "SLURM_NNODES": "4",
    "SLURM_NODEID": "2",
    "SLURM_JOB_NODELIST": "gpu[07-10]",
}


@pytest.mark.parametrize(
    ("nodelist", "host"),
    [
        ("node[01-04,07],gpu5", "node01"),
        ("a,b,c", "a"),
        ("solo", "solo"),
        ("gpu5,node[1-2]", "gpu5"),
        ("rack1-n[3,5-6]-ib", "rack1-n3-ib"),
    ],
)
def test_first_host_of_a_node_list(nodelist: str, host: str) -> None:
    assert first_host(nodelist) == host


def test_bad_or_single_node_allocations_change_nothing() -> None:
    with pytest.raises(ValueError, match="malformed"):
        first_host("node[01-04")
    assert slurm_defaults({**SLURM, "SLURM_NNODES": "1"}) == {}
    assert slurm_defaults({**SLURM, "SLURM_JOB_NODELIST": "n[1"}) == {}
    assert slurm_defaults({}) == {}


def test_run_takes_its_world_from_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("PET_NNODES", "TPELASTIC_NNODES", "PET_RDZV_ENDPOINT", "TPELASTIC_RDZV_ENDPOINT"):
        monkeypatch.delenv(key, raising=False)
    for key, value in SLURM.items():
        monkeypatch.setenv(key, value)
    config = config_from_args(parse_args(["train.py"]))
    assert (config.min_nodes, config.max_nodes) == (4, 4)
    assert (config.rdzv_backend, config.rdzv_endpoint, config.run_id) == (
        "c10d",
        "gpu07:29400",
        "slurm-4242",
    )
    given = config_from_args(parse_args(["--nnodes", "2:4", "--rdzv-id", "mine", "train.py"]))
    assert (given.min_nodes, given.max_nodes, given.run_id) == (2, 4, "mine")
    monkeypatch.setenv("PET_RDZV_ENDPOINT", "head:1234")
    assert config_from_args(parse_args(["train.py"])).rdzv_endpoint == "head:1234"
