"""What the handler conformance machine hands a handler factory, and the built-in backends' one.

A handler factory is a module-level function ``(AgentSpec) -> RendezvousHandler``, named as
``"module:function"`` because each agent of the machine is its own process and imports it there.
"""

from __future__ import annotations

from typing import Any

from attrs import field, frozen

from tpelastic.adapters.rendezvous.handler import RendezvousHandler
from tpelastic.adapters.rendezvous.parameters import RendezvousParameters


@frozen(kw_only=True)
class AgentSpec:
    """One agent of the machine, as its handler factory sees it.

    Attributes:
        slot: the agent's slot, ``0 .. slots-1``; a slot is reused after its agent is gone
            (a replacement node, e.g. the same static rank after a crash).
        min_nodes, max_nodes: the rendezvous bounds every agent of the run uses.
        options: the machine's ``options`` mapping, as given (JSON values): where the store is,
            the run id, timeouts.
    """

    slot: int
    min_nodes: int
    max_nodes: int
    options: dict[str, Any] = field(factory=dict)


def builtin_handler(spec: AgentSpec) -> RendezvousHandler:
    """A built-in backend's handler, from ``options`` ``backend``, ``endpoint``, ``run_id`` and
    ``conf`` (the ``--rdzv-conf`` mapping). The ``static`` backend gets ``rank = slot``."""
    from tpelastic.rendezvous import create_handler

    options = spec.options
    conf = dict(options.get("conf", {}))
    if options["backend"] == "static":
        conf.setdefault("rank", spec.slot)
    params = RendezvousParameters(
        str(options["backend"]),
        str(options["endpoint"]),
        str(options["run_id"]),
        spec.min_nodes,
        spec.max_nodes,
        local_addr="127.0.0.1",
        **conf,
    )
    return create_handler(params)


__all__ = ["AgentSpec", "builtin_handler"]
