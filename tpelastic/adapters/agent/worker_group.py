"""WorkerGroup as torch's agent API shows it: one spec's workers and what the round assigned.

The agent decides with the core's pure group value (``tpelastic.core.group_values``); this is
the view ``get_worker_group`` hands to callers written for torch: mutable attributes under
torch's names, filled from the core's group and the round's facts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tpelastic.core.worker_values import Worker, WorkerState

if TYPE_CHECKING:
    from tpelastic.adapters.agent.env import RoundFacts
    from tpelastic.adapters.agent.spec import WorkerSpec
    from tpelastic.core.group_values import WorkerGroup as GroupValue


class WorkerGroup:
    """The workers of one :class:`WorkerSpec` on this node (torch's ``WorkerGroup(spec)``).

    A new group has ``spec.local_world_size`` workers with only their local rank, state
    ``INIT`` and no round facts (``store``, ``group_rank``, ``group_world_size``,
    ``master_addr``, ``master_port`` are None), as torch's; ``round`` and ``restart_count``
    are ours (None before a round).
    """

    __slots__ = [
        "spec",
        "workers",
        "store",
        "group_rank",
        "group_world_size",
        "state",
        "master_addr",
        "master_port",
        "round",
        "restart_count",
    ]

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.workers: list[Worker] = [Worker(local_rank=i) for i in range(spec.local_world_size)]
        self.store: Any = None
        self.group_rank: int | None = None
        self.group_world_size: int | None = None
        self.master_addr: str | None = None
        self.master_port: int | None = None
        self.state = WorkerState.INIT
        self.round: int | None = None
        self.restart_count: int | None = None

    @classmethod
    def of(
        cls, spec: WorkerSpec, group: GroupValue, facts: RoundFacts | None, store: Any = None
    ) -> WorkerGroup:
        """The view of the core's ``group`` for ``spec``, with the round's ``facts``."""
        view = cls(spec)
        view.workers = list(group.workers)
        view.state = group.phase
        view.round = group.round
        view.restart_count = group.restart_count
        view.store = store
        if facts is not None:
            view.group_rank = facts.group_rank
            view.group_world_size = facts.group_world_size
            view.master_addr = facts.master_addr
            view.master_port = facts.master_port
        return view

    def __repr__(self) -> str:
        return (
            f"WorkerGroup(role={self.spec.role!r}, state={self.state.name}, "
            f"group_rank={self.group_rank}, group_world_size={self.group_world_size}, "
            f"workers={len(self.workers)})"
        )


__all__ = ["WorkerGroup"]
