"""The launcher: LaunchConfig, elastic_launch, launch_agent.

This module is the public import path for these names; they are defined under
``tpelastic.core`` and ``tpelastic.adapters`` and re-exported here. Names not yet listed in
``__all__`` arrive with the agent and launcher issue.
"""

__all__: list[str] = []
