"""Simulation: run the real core machines for many nodes in virtual time.

This module is the public import path for these names; they are defined under
``tpelastic.core`` and ``tpelastic.adapters`` and re-exported here. Names not yet listed in
``__all__`` arrive with the simulation issue.
"""

__all__: list[str] = []
