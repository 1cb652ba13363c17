"""Rendezvous: RendezvousHandler, RendezvousParameters, RendezvousInfo, RendezvousStoreInfo,
RendezvousSettings, DynamicRendezvousHandler, StaticTCPRendezvous, P10dRendezvousBackend,
TpRendezvousBackend, create_handler and the Rendezvous*Error types.

This module is the public import path for these names; they are defined under
``tpelastic.core`` and ``tpelastic.adapters`` and re-exported here. Names not yet listed in
``__all__`` arrive with the rendezvous issue.
"""

__all__: list[str] = []
