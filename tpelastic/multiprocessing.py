"""Worker processes: start_processes, PContext, RunProcsResult, ProcessFailure, Std, Redirects,
LogsSpecs, LogsDest, to_map.

This module is the public import path for these names; they are defined in
``tpelastic.adapters.workers`` and re-exported here. See docs/processes.md.
"""

from tpelastic.adapters.workers import (
    DefaultLogsSpecs,
    LogsDest,
    LogsSpecs,
    MultiprocessContext,
    PContext,
    ProcessFailure,
    Redirects,
    RunProcsResult,
    SignalAction,
    SignalException,
    SignalPolicy,
    Std,
    SubprocessContext,
    WorkerStartError,
    install_signal_policy,
    start_processes,
    to_map,
)

__all__ = [
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
    "start_processes",
    "to_map",
]
