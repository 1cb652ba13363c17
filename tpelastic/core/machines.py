"""Every machine of the core, in the order specs/ lists them."""

from __future__ import annotations

from tpelastic.core.table import Table


def all_tables() -> tuple[Table, ...]:
    """The validated tables of every machine (each is built once, at its module's import)."""
    from tpelastic.core import agent, in_process, membership, progress, worker, worker_group
    from tpelastic.core.agent import departure
    from tpelastic.core.rendezvous import join, join_retry, member, peer_wait

    tables: list[Table] = []
    tables.append(join.TABLE)
    tables.append(join_retry.TABLE)
    tables.append(member.TABLE)
    tables.append(peer_wait.TABLE)
    tables.append(worker.TABLE)
    tables.append(worker_group.TABLE)
    tables.append(progress.TABLE)
    tables.append(agent.TABLE)
    tables.append(membership.TABLE)
    tables.append(departure.TABLE)
    tables.append(in_process.TABLE)
    return tuple(tables)
