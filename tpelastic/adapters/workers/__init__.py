"""Worker processes: start, watch and stop the local workers of one agent.

See docs/processes.md for how it works (process trees, parent-death signal, tee, error files,
signal policy). The public names are re-exported by ``tpelastic.multiprocessing`` and
``tpelastic.errors``.
"""

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
from tpelastic.adapters.workers.logs import LogsSpecs
from tpelastic.adapters.workers.multiprocessing_context import MultiprocessContext
from tpelastic.adapters.workers.signals import (
    SignalAction,
    SignalException,
    SignalPolicy,
    install_signal_policy,
)
from tpelastic.adapters.workers.start import start_processes
from tpelastic.adapters.workers.subprocess_context import SubprocessContext

__all__ = [
    "ERROR_FILE_ENV",
    "SCHEMA_VERSION",
    "ChildFailedError",
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
