"""Timers: TimerClient, TimerServer, configure, expires; and the worker-progress heartbeat.

This module is the public import path for these names; they are defined under
``tpelastic.adapters.timer`` and ``tpelastic.adapters.progress`` and re-exported here.
``progress`` is the heartbeat module: call ``tpelastic.timer.progress.step()`` once per
training step (see docs/observability.md).
"""

from tpelastic.adapters import progress
from tpelastic.adapters.progress import ProgressWatch, Stall, read_progress
from tpelastic.adapters.timer.api import (
    TIMER_FILE_ENV,
    ExpiredTimer,
    RequestQueue,
    TimerClient,
    TimerRequest,
    TimerServer,
    configure,
    expires,
    get_default_client,
)
from tpelastic.adapters.timer.file_based import FileTimerClient, FileTimerServer
from tpelastic.adapters.timer.local import LocalTimerClient, LocalTimerServer

__all__ = [
    "TIMER_FILE_ENV",
    "ExpiredTimer",
    "FileTimerClient",
    "FileTimerServer",
    "LocalTimerClient",
    "LocalTimerServer",
    "ProgressWatch",
    "RequestQueue",
    "Stall",
    "TimerClient",
    "TimerRequest",
    "TimerServer",
    "configure",
    "expires",
    "get_default_client",
    "progress",
    "read_progress",
]
