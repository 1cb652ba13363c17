"""NUMA binding of workers: the CPUs each local rank may run on, read from /sys.

torch binds a GPU worker to the CPUs near its GPU. Our workers run on CPUs, so a worker's NUMA
node is its share of the machine's nodes: local ranks are dealt to the nodes in blocks, in order
(with 8 workers on 2 nodes, ranks 0-3 on node 0 and 4-7 on node 1), as GPUs are laid out. Then
each mode picks CPUs as torch's does (torch.numa.binding): ``node`` all the node's CPUs,
``socket`` all CPUs of the nodes on the node's socket, ``exclusive`` the node's physical cores
split evenly among the node's workers (the lowest ranks get one more when they do not divide),
``core-complex`` one last-level-cache group of the node per worker, largest groups first. Only
CPUs this process may use count. A machine with one NUMA node maps every worker to node 0.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

MODES = ("node", "socket", "exclusive", "core-complex")
SYS = "/sys/devices/system"


class NumaError(RuntimeError):
    """No binding could be computed (one line naming why)."""


def parse_cpu_list(text: str) -> set[int]:
    """``"0-2,4,6-7"`` (sysfs' list format) as ``{0, 1, 2, 4, 6, 7}``."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as src:
            return src.read()
    except OSError as err:
        raise NumaError(f"NUMA binding: cannot read {path}: {err.strerror}") from None


def mode_name(options: object) -> str:
    """The mode of ``options``: a mode name, or torch's ``NumaOptions`` (its affinity_mode)."""
    mode = getattr(options, "affinity_mode", options)
    mode = getattr(mode, "value", mode)
    if mode not in MODES:
        raise NumaError(f"NUMA binding: unknown mode {mode!r}; use one of {', '.join(MODES)}")
    return str(mode)


def binding(
    options: object,
    local_world_size: int,
    sys_root: str = SYS,
    allowed: Iterable[int] | None = None,
) -> dict[int, frozenset[int]]:
    """For each local rank ``0..local_world_size-1``, the CPUs it is bound to.

    Args:
        options: the mode (``node``, ``socket``, ``exclusive``, ``core-complex``) or torch's
            ``NumaOptions``.
        local_world_size: how many workers this node starts.
        sys_root: where ``node/`` and ``cpu/`` of sysfs are.
        allowed: the CPUs this process may use (default: its own affinity).

    Raises:
        NumaError: the topology cannot be read, or a worker would get no CPU.
    """
    mode = mode_name(options)
    usable = set(os.sched_getaffinity(0) if allowed is None else allowed)
    nodes = sorted(_online_nodes(sys_root))
    node_cpus = {
        n: parse_cpu_list(_read(f"{sys_root}/node/node{n}/cpulist")) & usable for n in nodes
    }
    nodes = [n for n in nodes if node_cpus[n]]  # a node with no usable CPU gets no worker
    if not nodes:
        raise NumaError("NUMA binding: no NUMA node has a CPU this process may use")
    node_of = {
        rank: nodes[rank * len(nodes) // local_world_size] for rank in range(local_world_size)
    }
    result: dict[int, frozenset[int]] = {}
    for rank in range(local_world_size):
        node = node_of[rank]
        peers = sorted(r for r in node_of if node_of[r] == node)
        if mode == "node":
            cpus = node_cpus[node]
        elif mode == "socket":
            socket = _socket(sys_root, min(node_cpus[node]))
            cpus = set().union(
                *(node_cpus[n] for n in nodes if _socket(sys_root, min(node_cpus[n])) == socket)
            )
        elif mode == "exclusive":
            cpus = _exclusive(sys_root, node_cpus[node], peers.index(rank), len(peers), node)
        else:
            groups = _group(node_cpus[node], lambda cpu: _cache_group(sys_root, cpu))
            ordered = sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
            cpus = ordered[peers.index(rank) % len(ordered)][1]
        result[rank] = frozenset(cpus)
    return result


def _online_nodes(sys_root: str) -> set[int]:
    path = f"{sys_root}/node/online"
    if not os.path.exists(path):  # a kernel without NUMA: one node holding every CPU
        raise NumaError(f"NUMA binding: {path} does not exist (no NUMA support in this kernel)")
    return parse_cpu_list(_read(path))


def _socket(sys_root: str, cpu: int) -> int:
    return int(_read(f"{sys_root}/cpu/cpu{cpu}/topology/physical_package_id"))


def _group(cpus: Iterable[int], key: object) -> dict[int, set[int]]:
    groups: dict[int, set[int]] = {}
    for cpu in cpus:
        groups.setdefault(key(cpu), set()).add(cpu)  # type: ignore[operator]
    return groups


def _exclusive(sys_root: str, cpus: set[int], index: int, count: int, node: int) -> set[int]:
    def core(cpu: int) -> int:
        siblings = parse_cpu_list(_read(f"{sys_root}/cpu/cpu{cpu}/topology/thread_siblings_list"))
        return min(siblings | {cpu})

    cores = [group for _, group in sorted(_group(cpus, core).items())]
    each, extra = divmod(len(cores), count)
    if each < 1:
        raise NumaError(
            f"NUMA binding exclusive: node {node} has {len(cores)} usable physical core(s) "
            f"for {count} workers"
        )
    start = index * each + min(index, extra)
    end = start + each + (1 if index < extra else 0)
    return set().union(*cores[start:end])


def _cache_group(sys_root: str, cpu: int) -> int:
    """The lowest CPU sharing ``cpu``'s last-level data cache (the group's name)."""
    base = f"{sys_root}/cpu/cpu{cpu}/cache"
    best_level, shared = -1, {cpu}
    try:
        entries = os.listdir(base)
    except OSError:
        return cpu  # no cache information: every CPU its own group
    for entry in entries:
        if not (entry.startswith("index") and entry[5:].isdecimal()):
            continue
        if _read(f"{base}/{entry}/type").strip() not in ("Unified", "Data"):
            continue
        level = int(_read(f"{base}/{entry}/level"))
        if level > best_level:
            best_level = level
            shared = parse_cpu_list(_read(f"{base}/{entry}/shared_cpu_list"))
    return min(shared | {cpu})


__all__ = ["MODES", "NumaError", "binding", "mode_name", "parse_cpu_list"]
