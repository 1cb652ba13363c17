"""tpelastic: elastic, fault-tolerant distributed training for tensorplay.

Public names live in modules that mirror the reference documentation's sections:
``tpelastic.launcher``, ``tpelastic.agent``, ``tpelastic.rendezvous``,
``tpelastic.multiprocessing``, ``tpelastic.errors``, ``tpelastic.data``, ``tpelastic.events``,
``tpelastic.metrics``, ``tpelastic.timer`` and ``tpelastic.sim``. Importing ``tpelastic`` itself
stays cheap: it does not import tensorplay.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
