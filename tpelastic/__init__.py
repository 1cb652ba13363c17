"""tpelastic: elastic, fault-tolerant distributed training for tensorplay.

Public names live in modules that mirror the reference documentation's sections:
``tpelastic.launcher``, ``tpelastic.agent``, ``tpelastic.rendezvous``,
``tpelastic.multiprocessing``, ``tpelastic.errors``, ``tpelastic.data``, ``tpelastic.events``,
``tpelastic.metrics``, ``tpelastic.timer`` and ``tpelastic.sim``. Importing ``tpelastic`` itself
stays cheap: it does not import tensorplay. The most used names (``LaunchConfig``,
``elastic_launch``, ``launch_agent``, ``WorkerSpec``, ``LocalElasticAgent``, ``record``) are
also reachable here; they are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "LaunchConfig": "tpelastic.launcher",
    "elastic_launch": "tpelastic.launcher",
    "launch_agent": "tpelastic.launcher",
    "WorkerSpec": "tpelastic.agent",
    "LocalElasticAgent": "tpelastic.agent",
    "record": "tpelastic.errors",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tpelastic' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    # The lazy names too, so that dir() and help(tpelastic) list them (help imports them).
    return sorted({*globals(), *_LAZY})
