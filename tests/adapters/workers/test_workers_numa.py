"""NUMA binding: how local ranks are dealt to NUMA nodes and CPUs, on a described topology and
on this machine, and a callable worker bound before its code runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tpelastic.adapters.workers.numa import NumaError, binding, parse_cpu_list
from tpelastic.multiprocessing import start_processes


def _topology(
    root: Path, nodes: dict[int, str], siblings: dict[int, str], l3: dict[int, str]
) -> str:
    """A sysfs tree of ``nodes`` (node -> cpulist), hyper-thread ``siblings`` and L3 groups."""
    (root / "node").mkdir(parents=True)
    (root / "node" / "online").write_text(",".join(str(n) for n in nodes))
    for node, cpus in nodes.items():
        (root / "node" / f"node{node}").mkdir()
        (root / "node" / f"node{node}" / "cpulist").write_text(cpus)
        for cpu in parse_cpu_list(cpus):
            topo = root / "cpu" / f"cpu{cpu}" / "topology"
            topo.mkdir(parents=True)
            (topo / "physical_package_id").write_text(str(node // 2))
            (topo / "thread_siblings_list").write_text(siblings[cpu])
            cache = root / "cpu" / f"cpu{cpu}" / "cache" / "index3"
            cache.mkdir(parents=True)
            (cache / "type").write_text("Unified")
            (cache / "level").write_text("3")
            (cache / "shared_cpu_list").write_text(l3[cpu])
    return str(root)


def _two_nodes(tmp_path: Path) -> str:
    # node 0: cores {0,4} {1,5} {2,6} {3,7}; node 1: cores {8,12} ... {11,15}; one socket
    # (nodes 0 and 1 share package 0); L3 groups of two cores.
    siblings = {cpu: f"{cpu % 4 + cpu // 8 * 8},{cpu % 4 + cpu // 8 * 8 + 4}" for cpu in range(16)}
    l3 = {cpu: "0-1,4-5" if cpu in (0, 1, 4, 5) else "2-3,6-7" for cpu in range(8)}
    l3 |= {cpu: "8-9,12-13" if cpu in (8, 9, 12, 13) else "10-11,14-15" for cpu in range(8, 16)}
    return _topology(tmp_path, {0: "0-7", 1: "8-15"}, siblings, l3)


def test_ranks_are_dealt_to_nodes_in_blocks_and_modes_pick_as_torch(tmp_path: Path) -> None:
    root, cpus = _two_nodes(tmp_path), set(range(16))
    node = binding("node", 4, root, cpus)
    assert node == {0: set(range(8)), 1: set(range(8)), 2: set(range(8, 16)), 3: set(range(8, 16))}
    assert binding("socket", 4, root, cpus)[3] == set(range(16))  # both nodes on socket 0
    exclusive = binding("exclusive", 6, root, cpus)  # 3 workers per node, 4 cores per node
    assert exclusive[0] == {0, 4, 1, 5}  # the lowest rank gets the extra core
    assert exclusive[1] == {2, 6} and exclusive[2] == {3, 7}
    assert exclusive[3] == {8, 12, 9, 13}
    complexes = binding("core-complex", 4, root, cpus)
    assert complexes[0] == {0, 1, 4, 5} and complexes[1] == {2, 3, 6, 7}
    assert complexes[2] == {8, 9, 12, 13}


def test_only_allowed_cpus_count_and_too_many_exclusive_workers_is_one_error(
    tmp_path: Path,
) -> None:
    root = _two_nodes(tmp_path)
    assert binding("node", 2, root, {1, 2, 9})[1] == {9}
    assert binding("node", 2, root, {1, 2})[1] == {1, 2}  # node 1 has nothing allowed
    with pytest.raises(NumaError, match="node 0 has 4 usable physical core"):
        binding("exclusive", 10, root, set(range(16)))
    with pytest.raises(NumaError, match="unknown mode 'numa'"):
        binding("numa", 1, root)


def test_this_machine_maps_every_worker_to_its_first_node() -> None:
    online = parse_cpu_list(Path("/sys/devices/system/node/online").read_text())
    if online != {0}:
        pytest.skip(f"this machine has NUMA nodes {sorted(online)}")
    node0 = parse_cpu_list(Path("/sys/devices/system/node/node0/cpulist").read_text())
    allowed = os.sched_getaffinity(0)
    assert binding("node", 3) == {rank: node0 & allowed for rank in range(3)}
    assert binding("socket", 2)[1] == node0 & allowed


def _report_affinity(path: str) -> None:
    with open(path, "w") as out:
        out.write(",".join(str(c) for c in sorted(os.sched_getaffinity(0))))


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_a_callable_worker_runs_bound(tmp_path: Path, method: str) -> None:
    try:
        expected = binding("exclusive", 2)  # differs from no binding: no CPU shared
    except NumaError:
        pytest.skip("fewer than two physical cores allowed here")
    path = str(tmp_path / "cpus")
    envs = {0: {}, 1: {}}
    ctx = start_processes(
        "n",
        _report_affinity,
        {0: (path + "0",), 1: (path + "1",)},
        envs,
        start_method=method,
        numa_options="exclusive",
        log_dir=str(tmp_path / "logs"),
    )
    try:
        assert ctx.wait(timeout=60) is not None
    finally:
        ctx.close()
    for rank in (0, 1):
        seen = {int(c) for c in Path(path + str(rank)).read_text().split(",")}
        assert seen == expected[rank]
