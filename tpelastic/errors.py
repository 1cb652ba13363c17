"""Errors of worker processes: the record decorator, ProcessFailure, ChildFailedError.

This module is the public import path for these names; they are defined in
``tpelastic.adapters.workers`` and re-exported here. The error-file schema is in
docs/processes.md.
"""

from tpelastic.adapters.workers.api import ChildFailedError, ProcessFailure
from tpelastic.adapters.workers.error_handler import ErrorHandler, get_error_handler
from tpelastic.adapters.workers.errorfile import (
    ERROR_FILE_ENV,
    SCHEMA_VERSION,
    TORCH_ERROR_FILE_ENV,
    read_error_file,
    record,
)

__all__ = [
    "ERROR_FILE_ENV",
    "SCHEMA_VERSION",
    "TORCH_ERROR_FILE_ENV",
    "ChildFailedError",
    "ErrorHandler",
    "ProcessFailure",
    "get_error_handler",
    "read_error_file",
    "record",
]
