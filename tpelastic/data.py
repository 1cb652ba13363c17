"""Data utilities: ElasticDistributedSampler, CyclingIterator, get_env_variable_or_raise,
get_socket_with_port, macros.

This module is the public import path for these names; they are defined under
``tpelastic.adapters.data`` and re-exported here. Importing it imports tensorplay (the sampler
subclasses tensorplay's ``Sampler``).
"""

from tpelastic.adapters.data.cycling import CyclingIterator
from tpelastic.adapters.data.env import MissingEnvironmentVariable, get_env_variable_or_raise
from tpelastic.adapters.data.macros import Macros as macros
from tpelastic.adapters.data.net import get_socket_with_port
from tpelastic.adapters.data.sampler import ElasticDistributedSampler, epoch_order

__all__ = [
    "CyclingIterator",
    "ElasticDistributedSampler",
    "MissingEnvironmentVariable",
    "epoch_order",
    "get_env_variable_or_raise",
    "get_socket_with_port",
    "macros",
]
