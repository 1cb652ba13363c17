"""The launcher: LaunchConfig, elastic_launch, launch_agent.

This module is the public import path for these names; they are defined under
``tpelastic.adapters.launcher`` and re-exported here. See docs/launcher.md.
"""

from tpelastic.adapters.launcher.config import ConfigError, LaunchConfig
from tpelastic.adapters.launcher.launch import LaunchError, elastic_launch, launch_agent, run_agent

__all__ = [
    "ConfigError",
    "LaunchConfig",
    "LaunchError",
    "elastic_launch",
    "launch_agent",
    "run_agent",
]
