"""The handler conformance machine (tpelastic.testing.handler_contract) against every built-in
backend, and against broken handlers it must catch (tests/testing/broken_handlers.py)."""

from __future__ import annotations

import itertools
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from tpelastic.adapters.stores import tcp_store
from tpelastic.adapters.stores.tcp_server import StoreServer
from tpelastic.testing import ConformanceViolation, HandlerConformance, handler_conformance_machine

HERE = Path(__file__).resolve().parent
HEARTBEAT = 0.25
CONF: dict[str, Any] = {
    "keep_alive_interval": HEARTBEAT,
    "keep_alive_max_attempt": 4,
    "last_call_timeout": 0.2,
    "join_timeout": 60,
    "read_timeout": 5,
    "is_host": "false",
}
EXPIRY = HEARTBEAT * 4
_runs = itertools.count()
# Few examples of few steps: every step costs real processes and real timeouts.
EXAMPLES = {"dev": 1, "ci": 2, "nightly": 25}.get(os.environ.get("HYPOTHESIS_PROFILE", "dev"), 1)
STEPS = 6


def _fresh_run(backend: str, endpoint: str, **conf: Any) -> Callable[[], dict[str, Any]]:
    def options() -> dict[str, Any]:
        return {
            "backend": backend,
            "endpoint": endpoint,
            "run_id": f"conformance{os.getpid()}x{next(_runs)}",
            "conf": {**CONF, **conf},
        }

    return options


def _run(machine: type[HandlerConformance]) -> None:
    run_state_machine_as_test(
        machine, settings=settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None)
    )


# --- the built-in backends ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def our_tcp() -> Iterator[str]:
    server = StoreServer("127.0.0.1", 0).start()
    yield f"127.0.0.1:{server.port}"
    server.stop(2.0)


@pytest.fixture(scope="module")
def tensorplay_tcp() -> Iterator[str]:
    server = tcp_store("127.0.0.1", 0, is_server=True, timeout=5.0)
    yield f"127.0.0.1:{server.raw.port}"
    server.close()


@pytest.fixture(scope="module")
def etcd_endpoint() -> Iterator[str]:
    if shutil.which("etcd") is None:
        pytest.skip("the etcd binary is not installed (.ci/run installs Debian's etcd-server)")
    fixtures = str(HERE.parent / "adapters" / "stores")
    if fixtures not in sys.path:
        sys.path.insert(0, fixtures)
    from etcd_fixtures import etcd_cluster

    with etcd_cluster(1) as etcd:
        host, port = etcd.endpoints[0]
        yield f"{host}:{port}"


def _elastic(options: Callable[[], dict[str, Any]], **overrides: Any) -> type[HandlerConformance]:
    settings_of = {"min_nodes": 2, "max_nodes": 3, "sticky_ranks": True, "dead_after": EXPIRY}
    return handler_conformance_machine(
        "tpelastic.testing.handler_spec:builtin_handler",
        options=options,
        **{**settings_of, **overrides},
    )


@pytest.mark.slow
def test_our_tcpstore_backend_conforms(our_tcp: str) -> None:
    _run(_elastic(_fresh_run("tcp", our_tcp)))


@pytest.mark.slow
def test_the_c10d_alias_over_tensorplay_tcpstore_conforms(tensorplay_tcp: str) -> None:
    _run(_elastic(_fresh_run("c10d", tensorplay_tcp, store_type="tensorplay")))


@pytest.mark.slow
def test_the_file_backend_conforms(tmp_path: Path) -> None:
    paths = itertools.count()

    def options() -> dict[str, Any]:
        return {**_fresh_run("file", "")(), "endpoint": str(tmp_path / f"store{next(paths)}")}

    _run(_elastic(options))


@pytest.mark.slow
def test_the_etcd_backend_conforms(etcd_endpoint: str) -> None:
    # Leases expire in whole seconds: a node is dead to etcd 1-2 s after its last renewal.
    options = _fresh_run("etcd", etcd_endpoint, etcd_prefix=f"/conformance{os.getpid()}")
    _run(_elastic(options, dead_after=2.0))


@pytest.mark.slow
def test_the_static_backend_conforms(our_tcp: str) -> None:
    machine = handler_conformance_machine(
        "tpelastic.testing.handler_spec:builtin_handler",
        options=_fresh_run("static", our_tcp),
        slots=2,
        min_nodes=2,
        max_nodes=2,
        elastic=False,
        dead_after=EXPIRY,
    )
    _run(machine)


@pytest.mark.slow
def test_a_scripted_tour_of_every_fault_passes_on_our_tcpstore(our_tcp: str) -> None:
    """Each rule once, in an order hypothesis may not draw in a CI run's few examples."""
    machine = _elastic(_fresh_run("tcp", our_tcp))()
    try:
        machine.start_together()
        machine.settle()
        machine.start(pick=0)
        machine.settle()
        machine.crash(pick=1)
        machine.pause(pick=0, long=False)
        machine.settle()
        machine.start(pick=0)
        machine.pause(pick=0, long=True)
        machine.settle()
        machine.leave(pick=0)
        machine.settle()
        for check in (
            machine.inv_H1_agreement,
            machine.inv_H2_ranks_are_0_to_n_minus_1,
            machine.inv_H4_sticky_ranks,
            machine.inv_H6_never_give_up_while_the_job_can_go_on,
        ):
            check()
        rounds = {key for key in machine.worlds}
        assert len(rounds) >= 6, rounds  # the faults really formed new rounds
    finally:
        machine.teardown()


# --- broken handlers: the machine must catch each defect ---------------------------------------


def _broken(defect: str, our_tcp: str, **overrides: Any) -> HandlerConformance:
    machine = handler_conformance_machine(
        f"broken_handlers:{defect}",
        options=_fresh_run("tcp", our_tcp),
        pythonpath=(str(HERE),),
        **{"min_nodes": 2, "max_nodes": 3, "sticky_ranks": True, "dead_after": EXPIRY, **overrides},
    )
    return machine()


def _expect(ident: str, machine: HandlerConformance, *steps: Callable[[], None]) -> None:
    try:
        with pytest.raises(ConformanceViolation) as caught:
            machine.start_together()
            for step in steps:
                step()
            machine.inv_H1_agreement()
            machine.inv_H2_ranks_are_0_to_n_minus_1()
            machine.inv_H4_sticky_ranks()
            machine.inv_H6_never_give_up_while_the_job_can_go_on()
            machine.settle()
        # One defect may break more than one invariant (a duplicated rank also names the wrong
        # node); the one it was built to break must be among them.
        found = {caught.value.ident, *(v.ident for v in machine.violations)}
        assert ident in found, str(caught.value)
    finally:
        machine.teardown()


@pytest.mark.slow
def test_H1_a_handler_whose_members_disagree_is_caught(our_tcp: str) -> None:
    machine = _broken("disagree", our_tcp)
    _expect("H1", machine, machine.settle)


@pytest.mark.slow
def test_H2_a_handler_that_gives_one_rank_twice_is_caught(our_tcp: str) -> None:
    machine = _broken("duplicate_rank", our_tcp)
    _expect("H2", machine, machine.settle)


@pytest.mark.slow
def test_H3_a_handler_that_trains_two_worlds_at_once_is_caught(our_tcp: str) -> None:
    machine = _broken("second_world", our_tcp, min_nodes=1)
    _expect("H3", machine, machine.settle, lambda: machine.start(pick=0), machine.settle)


@pytest.mark.slow
def test_H4_a_handler_that_moves_surviving_ranks_is_caught(our_tcp: str) -> None:
    machine = _broken("unsticky", our_tcp)
    _expect("H4", machine, machine.settle, lambda: machine.start(pick=0), machine.settle)


@pytest.mark.slow
def test_H5_a_handler_that_never_completes_a_rejoin_is_caught(our_tcp: str) -> None:
    machine = _broken("stuck", our_tcp, min_nodes=1, liveness_bound=6.0)
    _expect("H5", machine, machine.settle, lambda: machine.crash(pick=0), machine.settle)


@pytest.mark.slow
def test_H6_a_handler_that_gives_up_with_nodes_up_is_caught(our_tcp: str) -> None:
    machine = _broken("gives_up", our_tcp, min_nodes=1)
    _expect("H6", machine, machine.settle, lambda: machine.start(pick=0), machine.settle)
