"""Handlers with one defect each, for the conformance machine to catch.

Each wraps the real dynamic handler (``builtin_handler``) and breaks one promise; the machine's
agents import this module by path (``pythonpath``), so it stays a plain module of functions.
"""

from __future__ import annotations

import time
from typing import Any

from attrs import evolve

from tpelastic.adapters.rendezvous.errors import RendezvousTimeoutError
from tpelastic.adapters.rendezvous.handler import RendezvousHandler
from tpelastic.rendezvous import DynamicRendezvousInfo
from tpelastic.testing import AgentSpec, builtin_handler


class Broken(RendezvousHandler):
    """Delegates to a real handler; ``alter`` changes what ``next_rendezvous`` answers."""

    def __init__(self, spec: AgentSpec, defect: str) -> None:
        self.inner: Any = builtin_handler(spec)
        self.slot = spec.slot
        self.defect = defect
        self.joins = 0

    def __getattr__(self, name: str) -> Any:  # watch, keep_alive_healthy, node_id, ...
        return getattr(self.inner, name)

    def next_rendezvous(self, **kwargs: Any) -> Any:
        self.joins += 1
        if self.defect == "second_world" and self.slot == 2:
            # Trains in a world of its own at once, beside the others' world.
            return DynamicRendezvousInfo(None, 0, 1, None, (self.inner.node_id,), round=1000)
        if self.defect == "stuck" and self.joins > 1:
            time.sleep(3600)  # never completes a re-join (the agent's hard timeout ends it)
        if self.defect == "gives_up" and self.joins > 1:
            raise RendezvousTimeoutError("gave up on purpose")
        info: DynamicRendezvousInfo = self.inner.next_rendezvous(**kwargs)
        if self.defect == "disagree" and self.slot == 1:
            return evolve(info, participants=tuple(reversed(info.participants)))
        if self.defect == "duplicate_rank" and self.slot == 1:
            return evolve(info, rank=(info.rank + 1) % info.world_size)
        if self.defect == "unsticky" and info.round % 2 == 1:
            flipped = tuple(reversed(info.participants))
            return evolve(info, rank=info.world_size - 1 - info.rank, participants=flipped)
        return info

    def get_backend(self) -> str:
        return str(self.inner.get_backend())

    def get_run_id(self) -> str:
        return str(self.inner.get_run_id())

    def is_closed(self) -> bool:
        return bool(self.inner.is_closed())

    def set_closed(self) -> None:
        self.inner.set_closed()

    def num_nodes_waiting(self) -> int:
        return int(self.inner.num_nodes_waiting())

    def shutdown(self) -> bool:
        return bool(self.inner.shutdown())


def disagree(spec: AgentSpec) -> RendezvousHandler:
    return Broken(spec, "disagree")


def duplicate_rank(spec: AgentSpec) -> RendezvousHandler:
    return Broken(spec, "duplicate_rank")


def second_world(spec: AgentSpec) -> RendezvousHandler:
    return Broken(spec, "second_world")


def unsticky(spec: AgentSpec) -> RendezvousHandler:
    return Broken(spec, "unsticky")


def stuck(spec: AgentSpec) -> RendezvousHandler:
    return Broken(spec, "stuck")


def gives_up(spec: AgentSpec) -> RendezvousHandler:
    return Broken(spec, "gives_up")
