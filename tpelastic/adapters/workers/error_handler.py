"""ErrorHandler: torch's object behind ``@record``, writing our error files."""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import shutil

from tpelastic.adapters.workers.errorfile import error_file_path, write_error_file

_log = logging.getLogger(__name__)


class ErrorHandler:
    """Writes a worker's uncaught exception to its error file (``TPELASTIC_ERROR_FILE``, or
    torch's ``TORCHELASTIC_ERROR_FILE``); see docs/processes.md for the schema."""

    def initialize(self) -> None:
        """Dump every thread's stack on a fatal signal (SIGSEGV, SIGABRT, ...) to stderr."""
        if not faulthandler.is_enabled():
            faulthandler.enable(all_threads=True)

    def error_file(self) -> str | None:
        """Where this process's error file goes, or None when the launcher set no path."""
        return error_file_path()

    def record_exception(self, e: BaseException) -> None:
        """Write ``e`` (message, type, traceback, time) to the error file; no-op without one."""
        write_error_file(e)

    def dump_error_file(self, rootcause_error_file: str, error_code: int = 0) -> None:
        """Copy a worker's error file (the root cause) to this process's error file, adding
        ``error_code`` when it is not 0; without a path of our own, log its contents."""
        with open(rootcause_error_file, encoding="utf-8") as fh:
            data = json.load(fh)
        if error_code:
            data["error_code"] = error_code
        target = self.error_file()
        if target is None:
            _log.error("no error file to dump to; root cause: %s", json.dumps(data))
            return
        if os.path.exists(target):
            _log.warning("error file %s exists; overwriting it with the root cause", target)
        tmp = f"{target}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        shutil.move(tmp, target)


def get_error_handler() -> ErrorHandler:
    """The error handler ``@record`` uses when it is given none."""
    return ErrorHandler()


__all__ = ["ErrorHandler", "get_error_handler"]
