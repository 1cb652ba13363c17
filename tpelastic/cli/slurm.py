"""Defaults for ``tpelastic run`` inside a Slurm allocation of several nodes.

Under ``srun`` (one task per node) every node's agent finds ``SLURM_JOB_ID``, ``SLURM_NNODES``,
``SLURM_NODEID`` and ``SLURM_JOB_NODELIST``. Unless the flag or its ``TPELASTIC_``/``PET_``
variable says otherwise, ``tpelastic run`` then takes ``--nnodes`` from the node count,
``--node-rank`` from the node id, ``--rdzv-backend c10d`` with the allocation's first host as
``--rdzv-endpoint`` (port 29400; that host's agent hosts the store) and ``slurm-<job id>`` as
``--rdzv-id``. One node, or no Slurm, changes nothing. See docs/clusters.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

SLURM_PORT = 29400


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list (``node[01-04,07],gpu5`` -> ``node01``).

    Raises:
        ValueError: an empty or malformed list.
    """
    text = nodelist.strip()
    prefix, _, rest = text.partition("[")
    if not rest:  # no bracket: a plain comma-separated list
        host = text.split(",", 1)[0].strip()
    elif "," in prefix:  # a plain host comes before the first bracket
        host = prefix.split(",", 1)[0].strip()
    else:
        ranges, close, suffix = rest.partition("]")
        if not close:
            raise ValueError(f"malformed Slurm node list {nodelist!r}")
        start = ranges.split(",", 1)[0].split("-", 1)[0].strip()
        host = prefix + start + suffix.split(",", 1)[0]
    if not host:
        raise ValueError(f"malformed Slurm node list {nodelist!r}")
    return host


def slurm_defaults(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Flag name (argparse dest) -> default from Slurm's variables; {} outside Slurm or on one
    node, or when the node list cannot be read."""
    env = os.environ if environ is None else environ
    nodes = env.get("SLURM_NNODES") or env.get("SLURM_JOB_NUM_NODES") or ""
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or ""
    if not job or not nodes.isdigit() or int(nodes) <= 1:
        return {}
    try:
        host = first_host(env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "")
    except ValueError:
        return {}
    return {
        "nnodes": nodes,
        "node_rank": env.get("SLURM_NODEID", "0"),
        "rdzv_backend": "c10d",
        "rdzv_endpoint": f"{host}:{SLURM_PORT}",
        "rdzv_id": f"slurm-{job}",
    }


__all__ = ["SLURM_PORT", "first_host", "slurm_defaults"]
