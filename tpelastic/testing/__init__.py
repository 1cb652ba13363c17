"""Shipped test helpers for people who build on tpelastic.

* ``tpelastic.testing.store_contract`` checks that a KeyValueStore adapter keeps the port's
  contract: plain ``check_*`` functions and a hypothesis machine comparing it with MemoryStore.
* ``tpelastic.testing.handler_contract`` checks a whole RendezvousHandler: the hypothesis
  machine :class:`HandlerConformance` runs agents around it as real processes, with joins,
  leaves, crashes and pauses, and checks the invariants of ``specs/handler_contract.md``
  (docs/testing-handlers.md). ``HandlerConformance``, ``handler_conformance_machine``,
  ``ConformanceViolation`` and ``AgentSpec`` are importable from here.

The machines need ``hypothesis`` (the ``test`` extra); it is imported only when one is asked for.
"""

from __future__ import annotations

from typing import Any

from tpelastic.testing.handler_spec import AgentSpec, builtin_handler

_MACHINE_NAMES = ("ConformanceViolation", "HandlerConformance", "handler_conformance_machine")


def __getattr__(name: str) -> Any:
    if name in _MACHINE_NAMES:
        from tpelastic.testing import handler_contract

        return getattr(handler_contract, name)
    raise AttributeError(f"module 'tpelastic.testing' has no attribute {name!r}")


__all__ = ["AgentSpec", "builtin_handler", *_MACHINE_NAMES]
