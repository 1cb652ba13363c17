"""Rendezvous: RendezvousHandler, RendezvousParameters, RendezvousInfo, RendezvousStoreInfo,
RendezvousSettings, DynamicRendezvousHandler, StaticTCPRendezvous, P10dRendezvousBackend,
TpRendezvousBackend, create_handler, run_join, KeepAlive and the Rendezvous*Error types.

This module is the public import path for these names; they are defined under
``tpelastic.core`` and ``tpelastic.adapters`` and re-exported here. ``handler_registry`` is the
default :class:`HandlerRegistry` that ``create_handler`` uses; build your own registry with
``builtin_registry()`` when you need an isolated one.
"""

from tpelastic.adapters.rendezvous.backends import (
    C10dRendezvousBackend,
    P10dRendezvousBackend,
    StoreRendezvousBackend,
    TpRendezvousBackend,
)
from tpelastic.adapters.rendezvous.driver import KeepAlive, run_join
from tpelastic.adapters.rendezvous.dynamic import DynamicRendezvousHandler, DynamicRendezvousInfo
from tpelastic.adapters.rendezvous.dynamic_factory import create_dynamic_handler
from tpelastic.adapters.rendezvous.errors import (
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousError,
    RendezvousGracefulExitError,
    RendezvousJoinTimeoutError,
    RendezvousStateError,
    RendezvousTimeoutError,
)
from tpelastic.adapters.rendezvous.handler import RendezvousHandler
from tpelastic.adapters.rendezvous.info import RendezvousInfo, RendezvousStoreInfo
from tpelastic.adapters.rendezvous.parameters import (
    RendezvousParameters,
    RendezvousTimeout,
    parse_rdzv_conf,
    parse_rendezvous_endpoint,
)
from tpelastic.adapters.rendezvous.registry import (
    ENTRY_POINT_GROUP,
    HandlerRegistry,
    RendezvousHandlerRegistry,
    builtin_registry,
)
from tpelastic.adapters.rendezvous.settings import RendezvousSettings
from tpelastic.adapters.rendezvous.static import StaticTCPRendezvous
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.membership import RoundWatch

handler_registry = builtin_registry()
"""The default registry: built-in backends plus installed entry points."""

create_handler = handler_registry.create_handler

rendezvous_handler_registry = handler_registry
"""torch's name for the default registry."""

__all__ = [
    "ENTRY_POINT_GROUP",
    "C10dRendezvousBackend",
    "DynamicRendezvousHandler",
    "DynamicRendezvousInfo",
    "HandlerRegistry",
    "KeepAlive",
    "P10dRendezvousBackend",
    "RendezvousClosedError",
    "RendezvousConfig",
    "RendezvousConnectionError",
    "RendezvousError",
    "RendezvousGracefulExitError",
    "RendezvousHandler",
    "RendezvousHandlerRegistry",
    "RendezvousInfo",
    "RendezvousJoinTimeoutError",
    "RendezvousParameters",
    "RendezvousSettings",
    "RendezvousStateError",
    "RendezvousStoreInfo",
    "RendezvousTimeout",
    "RendezvousTimeoutError",
    "RoundWatch",
    "StaticTCPRendezvous",
    "StoreRendezvousBackend",
    "TpRendezvousBackend",
    "builtin_registry",
    "create_dynamic_handler",
    "create_handler",
    "handler_registry",
    "rendezvous_handler_registry",
    "parse_rdzv_conf",
    "parse_rendezvous_endpoint",
    "run_join",
]
