"""``--rdzv-endpoint h1:p,h2:p,...`` on a TCPStore backend: every candidate is checked, and a
well-formed list is refused in one line (no failover across store hosts is built), before
anything starts."""

from __future__ import annotations

import contextlib
import io

import pytest

from tpelastic.adapters.launcher.checks import ConfigError, check_store_candidates
from tpelastic.cli import run


def _refusal(endpoint: str, backend: str = "c10d") -> str:
    err = io.StringIO()
    argv = ["--nnodes", "2", "--rdzv-backend", backend, "--rdzv-endpoint", endpoint, "x.py"]
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):
        code = run.main(argv)
    assert code == 2, err.getvalue()
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tpelastic run: error: "), lines
    return lines[0]


def test_candidates_are_parsed_in_order_with_ipv6_in_brackets() -> None:
    found = check_store_candidates("h1:29400, 10.0.0.2:29401,[::1]:29402")
    assert found == [("h1", 29400), ("10.0.0.2", 29401), ("::1", 29402)]


@pytest.mark.parametrize("backend", ["c10d", "tcp", "static"])
def test_a_well_formed_list_is_refused_naming_etcd(backend: str) -> None:
    line = _refusal("h1:29400,h2:29400,[::1]:29400", backend)
    assert "lists 3 store hosts (h1:29400, h2:29400, [::1]:29400)" in line
    assert f"the {backend} backend takes one host:port" in line and "etcd" in line


@pytest.mark.parametrize(
    ("endpoint", "says"),
    [
        ("h1:1,,h3:1", "store host 2 is empty"),
        ("h1:1,h1:1", "store host h1:1 is listed twice"),
        ("h1:1,h2", "store host 2 ('h2') needs host:port"),
        ("h1:1,300.1.1.1:5", "'300.1.1.1' is not an IPv4 address"),
        ("h1:1,h2:99999", "port 99999"),
        ("h1:1,http://h2:1", "looks like a URL"),
    ],
)
def test_a_bad_candidate_is_one_line_naming_it(endpoint: str, says: str) -> None:
    assert says in _refusal(endpoint)
    with pytest.raises(ConfigError, match="store host|port|URL|IPv4"):
        check_store_candidates(endpoint)


def test_several_etcd_members_are_still_the_etcd_clients_to_try() -> None:
    from tpelastic.adapters.launcher.checks import check_store_endpoint

    assert check_store_endpoint("etcd", "h1:2379,h2:2379") == ("", None)
