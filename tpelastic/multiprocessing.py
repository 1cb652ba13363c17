"""Worker processes: start_processes, PContext, RunProcsResult, ProcessFailure, Std, Redirects,
to_map.

This module is the public import path for these names; they are defined under
``tpelastic.core`` and ``tpelastic.adapters`` and re-exported here. Names not yet listed in
``__all__`` arrive with the worker processes issue.
"""

__all__: list[str] = []
