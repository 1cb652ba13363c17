"""Shared test settings: hypothesis profiles.

``dev`` is quick for the edit-test loop; ``ci`` (the default in scripts/test and CI) is more
thorough, derandomized so CI is stable, and still keeps the whole suite within about ten minutes on
two cores. ``nightly`` is for long hunts. Choose with HYPOTHESIS_PROFILE.
"""

import os
import pathlib
import random
from collections.abc import Iterator

import machine_load
import pytest
from hypothesis import HealthCheck, settings

from tpelastic.adapters import clock

_TESTS = pathlib.Path(__file__).resolve().parent

settings.register_profile("dev", max_examples=30, stateful_step_count=25, deadline=None)
settings.register_profile(
    "ci",
    max_examples=150,
    stateful_step_count=50,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("nightly", max_examples=5000, stateful_step_count=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(autouse=True)
def load_factor() -> Iterator[float]:
    """The machine's load factor, held for the whole test (tests/machine_load.py)."""
    with machine_load.pinned() as load:
        yield load


# The agent and rendezvous adapter tests run on a default clock shifted by a large random
# offset (inherited by the processes they start), so that a direct read of time.monotonic
# anywhere in the code under test gives a deadline far off and fails the test.
_OFFSET_CLOCK_DIRS = ("adapters/agent", "adapters/rendezvous")


@pytest.fixture(autouse=True)
def offset_clock(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> float:
    """The offset of the default clock in this test (0 outside the directories above)."""
    where = pathlib.Path(str(request.node.path)).resolve().relative_to(_TESTS).as_posix()
    if not where.startswith(_OFFSET_CLOCK_DIRS):
        return 0.0
    offset = random.Random().uniform(1e6, 1e7)
    monkeypatch.setattr(clock.SYSTEM_CLOCK, "_offset", offset)
    monkeypatch.setenv(clock.OFFSET_ENV, repr(offset))
    return offset


# scripts/test runs the suite on two xdist workers with ``--dist loadscope``: a module's tests
# run one after another on one worker, so its module fixtures (an etcd cluster, a store server)
# start once, and the two workers run two modules side by side. (``--dist loadgroup`` with
# xdist_group marks did not keep a group on one worker with xdist 3.8.) Their time bounds
# carry the machine's load (tests/machine_load.py).
# The longest modules (a serial run's --durations at load 15-20), longest first. xdist hands
# out work in collection order (scripts/test passes --no-loadscope-reorder): a long test handed
# out last would keep one worker busy after the other ran out of work.
_LONGEST_FIRST = (
    "properties/test_rendezvous_cluster.py",
    "sim/test_sim_liveness.py",
    "sim/test_sim_explore.py",
    "testing/test_handler_contract.py",
    "observability/test_obs_events.py",
    "sim/test_sim_network_faults.py",
    "adapters/stores/test_store_contract.py",
    "observability/test_obs_join_trace.py",
    "cli/test_cli_torchrun_differential.py",
    "test_api_reference.py",
    "properties/test_worker_lifecycle.py",
    "e2e/test_e2e_availability.py",
    "sim/test_sim_scenarios.py",
    "observability/test_obs_stuck.py",
    "sim/test_sim_bench_smoke.py",
    "e2e/test_e2e_torchrun_forms.py",
    "e2e/test_e2e_multi_node.py",
    "e2e/test_e2e_single_node.py",
    "bench/test_chaos_smoke.py",
    "properties/test_tables_total.py",
    "e2e/test_e2e_store_loss.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {module: i for i, module in enumerate(_LONGEST_FIRST)}
    where = {
        item: pathlib.Path(str(item.path)).resolve().relative_to(_TESTS).as_posix()
        for item in items
    }
    items.sort(key=lambda item: rank.get(where[item], len(rank)))
