"""The environment every worker gets: its ranks, its world, its attempt, under two spellings.

Variables are set under our own ``TPELASTIC_*`` names and under the names torchrun sets
(``TORCHELASTIC_*``), so scripts written for torchrun run unchanged.
"""

from __future__ import annotations

from attrs import frozen

from tpelastic.core.group_values import make_group
from tpelastic.core.values import value_eq, value_hash, value_repr


@frozen(kw_only=True)
class RoundFacts:
    """The facts of one completed round that the workers' environment needs."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    round: int
    group_rank: int
    group_world_size: int
    restart_count: int
    master_addr: str
    master_port: int
    attempt: int = 0  # the round's in-place attempt (0: its first start)
    # Rank 0's agent serves the bootstrap store at master_port: every worker is a client.
    agent_store: bool = False


def worker_envs(
    *,
    role: str,
    local_world_size: int,
    facts: RoundFacts,
    max_restarts: int,
    run_id: str,
) -> dict[int, dict[str, str]]:
    """Per local rank, the variables added to that worker's environment.

    Ranks come from the core's ``make_group`` (node ``group_rank`` owns a block of
    ``local_world_size`` consecutive global ranks), so every node computes the same world.
    The restart count is the job-wide one (the round's plus the in-place attempt): the same on
    every worker. ``TPELASTIC_ATTEMPT`` is the round's in-place attempt (0: its first start).

    Raises:
        ValueError: the round's ranks do not fit (from ``make_group``).
    """
    group = make_group(
        role=role,
        local_world_size=local_world_size,
        round=facts.round,
        restart_count=facts.restart_count,
        group_rank=facts.group_rank,
        group_world_size=facts.group_world_size,
    )
    shared = {
        "LOCAL_WORLD_SIZE": str(local_world_size),
        "MASTER_ADDR": facts.master_addr,
        "MASTER_PORT": str(facts.master_port),
        "GROUP_RANK": str(facts.group_rank),
        "GROUP_WORLD_SIZE": str(facts.group_world_size),
        "ROLE_NAME": role,
        "TPELASTIC_RESTART_COUNT": str(facts.restart_count),
        "TPELASTIC_MAX_RESTARTS": str(max_restarts),
        "TPELASTIC_RUN_ID": run_id,
        "TPELASTIC_ROUND": str(facts.round),
        "TPELASTIC_ATTEMPT": str(facts.attempt),
        "TORCHELASTIC_RESTART_COUNT": str(facts.restart_count),
        "TORCHELASTIC_MAX_RESTARTS": str(max_restarts),
        "TORCHELASTIC_RUN_ID": run_id,
        # "True": rank 0's agent serves MASTER_PORT and every worker connects as a client;
        # "False": rank 0's worker hosts the store there (a fresh one each attempt).
        "TORCHELASTIC_USE_AGENT_STORE": str(facts.agent_store),
    }
    envs: dict[int, dict[str, str]] = {}
    for worker in group.workers:
        envs[worker.local_rank] = {
            **shared,
            "RANK": str(worker.global_rank),
            "WORLD_SIZE": str(worker.world_size),
            "LOCAL_RANK": str(worker.local_rank),
            "ROLE_RANK": str(worker.role_rank),
            "ROLE_WORLD_SIZE": str(worker.role_world_size),
        }
    return envs


__all__ = ["RoundFacts", "worker_envs"]
