"""Error files: how a worker tells its agent why it died.

A worker started by tpelastic finds a path in ``TPELASTIC_ERROR_FILE`` (and the same path in
``TORCHELASTIC_ERROR_FILE``, so torchrun-style scripts work unchanged). When an exception escapes
a function wrapped by ``record``, the worker writes one JSON object there before re-raising; the
agent reads it into ``ProcessFailure.error_file_data``. The schema (version 1) is documented in
docs/processes.md; readers must ignore fields they do not know.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import sys
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock

ERROR_FILE_ENV = "TPELASTIC_ERROR_FILE"
TORCH_ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"
SCHEMA_VERSION = 1

F = TypeVar("F", bound=Callable[..., Any])


def error_file_path() -> str | None:
    """The error-file path this process was given, or None when it runs outside tpelastic."""
    return os.environ.get(ERROR_FILE_ENV) or os.environ.get(TORCH_ERROR_FILE_ENV) or None


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.lstrip("-").isdigit() else None


def error_record(exc: BaseException, clock: Clock = SYSTEM_CLOCK) -> dict[str, Any]:
    """The schema-1 JSON object that describes ``exc`` raised in this process (stamped with
    ``clock``'s wall time, for people)."""
    kind = type(exc)
    module = "" if kind.__module__ == "builtins" else f"{kind.__module__}."
    return {
        "schema_version": SCHEMA_VERSION,
        "message": str(exc) or kind.__name__,
        "exception_type": f"{module}{kind.__qualname__}",
        "traceback": "".join(traceback.format_exception(kind, exc, exc.__traceback__)),
        "timestamp": clock.wall(),
        "rank": _env_int("RANK"),
        "local_rank": _env_int("LOCAL_RANK"),
        "pid": os.getpid(),
        "host": socket.gethostname(),
    }


def write_error_file(exc: BaseException, path: str | None = None) -> str | None:
    """Write the error file for ``exc``; returns the path written, or None when there is none.

    An existing file is not overwritten: the first error of a process is the one that matters
    (a later one is usually a consequence). The write goes through a temporary file and a rename
    so the agent never reads half a file. Failure to write is reported on stderr, never raised,
    so the original exception still propagates.
    """
    path = path or error_file_path()
    if not path:
        return None
    if os.path.exists(path):
        print(f"tpelastic: error file {path} exists; not overwriting it", file=sys.stderr)
        return path
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as out:
            json.dump(error_record(exc), out, indent=2)
        os.replace(tmp, path)
    except OSError as err:
        print(f"tpelastic: could not write error file {path}: {err}", file=sys.stderr)
        return None
    return path


def read_error_file(path: str) -> dict[str, Any] | None:
    """Read an error file into a schema-1 dict; None when it is missing or unreadable.

    A torch-style file (``{"message": {"message": ..., "extraInfo": {...}}}``) and tensorplay's
    (``{"message": ..., "extraInfo": {"traceback": ...}}``) are converted to schema 1, so workers
    that use torch's or tensorplay's ``@record`` still report their traceback.
    """
    try:
        with open(path, encoding="utf-8") as src:
            data = json.load(src)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    message = data.get("message")
    extra = data.get("extraInfo")
    if isinstance(message, str) and isinstance(extra, dict) and "schema_version" not in data:
        # tensorplay's @record: {"message": repr(exc), "extraInfo": {"traceback": ...}}
        return {
            "schema_version": SCHEMA_VERSION,
            "message": message,
            "exception_type": None,
            "traceback": extra.get("traceback"),
            "timestamp": _float_or_none(extra.get("timestamp", data.get("timestamp"))),
        }
    if isinstance(message, dict):
        extra = message.get("extraInfo") or {}
        return {
            "schema_version": SCHEMA_VERSION,
            "message": str(message.get("message", "")),
            "exception_type": None,
            "traceback": extra.get("py_callstack"),
            "timestamp": _float_or_none(extra.get("timestamp")),
        }
    return data


def _float_or_none(value: object) -> float | None:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def record(fn: F, error_handler: Any = None) -> F:
    """Decorate a worker entrypoint so an uncaught exception leaves an error file behind.

    The exception is written (by ``error_handler.record_exception``, else ``write_error_file``)
    and then re-raised unchanged, so the process still prints its traceback and exits non-zero.
    ``SystemExit`` and ``KeyboardInterrupt`` are not recorded: they are exits, not errors.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if error_handler is not None:
                error_handler.record_exception(exc)
            else:
                write_error_file(exc)
            raise

    return wrapper  # type: ignore[return-value]


__all__ = [
    "ERROR_FILE_ENV",
    "SCHEMA_VERSION",
    "TORCH_ERROR_FILE_ENV",
    "error_file_path",
    "error_record",
    "read_error_file",
    "record",
    "write_error_file",
]
