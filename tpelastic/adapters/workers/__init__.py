"""Worker processes: start, watch and stop the local workers of one agent.

See docs/processes.md for how it works (process trees, parent-death signal, tee, error files,
signal policy). The public names are re-exported by ``tpelastic.multiprocessing`` and
``tpelastic.errors``.

The names below are imported on first use: ``tpelastic run`` imports only the modules a job of
commands needs (not multiprocessing, nor psutil unless a tree must be stopped), and importing
one submodule such as ``workers.api`` must not pull in all the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tpelastic.adapters.workers.api import (
        ChildFailedError,
        ProcessFailure,
        Redirects,
        RunProcsResult,
        Std,
        WorkerStartError,
        to_map,
    )
    from tpelastic.adapters.workers.context import PContext
    from tpelastic.adapters.workers.errorfile import ERROR_FILE_ENV, SCHEMA_VERSION, record
    from tpelastic.adapters.workers.logs import DefaultLogsSpecs, LogsDest, LogsSpecs
    from tpelastic.adapters.workers.multiprocessing_context import MultiprocessContext
    from tpelastic.adapters.workers.signals import (
        SignalAction,
        SignalException,
        SignalPolicy,
        install_signal_policy,
    )
    from tpelastic.adapters.workers.start import start_processes
    from tpelastic.adapters.workers.subprocess_context import SubprocessContext

_HOME = {
    "ChildFailedError": "api",
    "ProcessFailure": "api",
    "Redirects": "api",
    "RunProcsResult": "api",
    "Std": "api",
    "WorkerStartError": "api",
    "to_map": "api",
    "PContext": "context",
    "ERROR_FILE_ENV": "errorfile",
    "SCHEMA_VERSION": "errorfile",
    "record": "errorfile",
    "DefaultLogsSpecs": "logs",
    "LogsDest": "logs",
    "LogsSpecs": "logs",
    "MultiprocessContext": "multiprocessing_context",
    "SignalAction": "signals",
    "SignalException": "signals",
    "SignalPolicy": "signals",
    "install_signal_policy": "signals",
    "start_processes": "start",
    "SubprocessContext": "subprocess_context",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:  # also how ``from ... import shim`` falls through to the submodule
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "ERROR_FILE_ENV",
    "SCHEMA_VERSION",
    "ChildFailedError",
    "DefaultLogsSpecs",
    "LogsDest",
    "LogsSpecs",
    "MultiprocessContext",
    "PContext",
    "ProcessFailure",
    "Redirects",
    "RunProcsResult",
    "SignalAction",
    "SignalException",
    "SignalPolicy",
    "Std",
    "SubprocessContext",
    "WorkerStartError",
    "install_signal_policy",
    "record",
    "start_processes",
    "to_map",
]
