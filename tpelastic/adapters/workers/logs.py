"""Where a worker group's files go: one folder per attempt, one sub-folder per local rank.

Layout (``attempt`` is the number or id the caller passes; without one the next free number is
used). The agent passes its run's own folder as ``log_dir``: ``<--log-dir>/<run id>_<random>``
(``make_run_dir``), in a temporary folder without ``--log-dir``, removed at the end of the run
unless the user asked for logs (``--redirects``/``--tee``):

    <log_dir>/attempt_<attempt>/<local_rank>/stdout.log   (when stdout is redirected or teed)
                                            /stderr.log   (when stderr is redirected or teed)
                                            /error.json   (written by the worker, if it fails)
                                            /return.pickle (callables only, on success)
    <log_dir>/attempt_<attempt>/filtered_stdout.log       (--duplicate-stdout-filters)
                               /filtered_stderr.log       (--duplicate-stderr-filters)

A folder that already exists is never reused: ``attempt_3`` becomes ``attempt_3.1`` and so on,
so a restart never overwrites the previous attempt's logs.
"""

from __future__ import annotations

import os
import re

from attrs import define, field, frozen

from tpelastic.adapters.workers.api import Std, WorkerStartError, to_map
from tpelastic.core.values import value_eq, value_hash, value_repr


@frozen(kw_only=True)
class RankFiles:
    """The files of one local rank. ``stdout``/``stderr`` are "" when that stream is inherited."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    local_rank: int
    folder: str
    stdout: str
    stderr: str
    tee_stdout: bool
    tee_stderr: bool
    error_file: str
    return_file: str


@define
class LogsDest:
    """Where one attempt's output goes, per local rank (torch's ``LogsDest``).

    ``stdouts``/``stderrs`` hold a file path, "" for the agent's console or ``os.devnull``;
    ``tee_stdouts``/``tee_stderrs`` name the ranks whose file is also copied to the console;
    ``filtered_stdout``/``filtered_stderr`` receive the teed lines that match the duplicate
    filters. ``attempt_dir`` is the attempt's folder ("" when a plugin does not say).
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash  # its tables are dicts: unhashable, as torch's dataclass

    stdouts: dict[int, str] = field(factory=dict)
    stderrs: dict[int, str] = field(factory=dict)
    tee_stdouts: dict[int, str] = field(factory=dict)
    tee_stderrs: dict[int, str] = field(factory=dict)
    error_files: dict[int, str] = field(factory=dict)
    filtered_stdout: str = field(factory=str)
    filtered_stderr: str = field(factory=str)
    attempt_dir: str = field(default="", kw_only=True)


def rank_files(dest: object, local_world_size: int) -> tuple[str, dict[int, RankFiles]]:
    """The attempt folder and each rank's files from a ``LogsDest``: ours, or the one a torch
    ``LogsSpecs`` plugin returns (the same fields).

    Raises:
        WorkerStartError: the destination does not name an error file for every rank.
    """
    errors: dict[int, str] = dict(getattr(dest, "error_files", {}) or {})
    missing = [rank for rank in range(local_world_size) if not errors.get(rank)]
    if missing:
        raise WorkerStartError(
            f"the logs destination names no error file for local rank(s) {missing}"
        )
    attempt_dir = str(getattr(dest, "attempt_dir", "") or "")
    if not attempt_dir:
        attempt_dir = os.path.dirname(os.path.dirname(errors[0]))
    outs: dict[int, str] = dict(getattr(dest, "stdouts", {}) or {})
    errs: dict[int, str] = dict(getattr(dest, "stderrs", {}) or {})
    tee_out = dict(getattr(dest, "tee_stdouts", {}) or {})
    tee_err = dict(getattr(dest, "tee_stderrs", {}) or {})
    files = {}
    for rank in range(local_world_size):
        folder = os.path.dirname(errors[rank])
        stdout, stderr = outs.get(rank, ""), errs.get(rank, "")
        files[rank] = RankFiles(
            local_rank=rank,
            folder=folder,
            stdout=stdout,
            stderr=stderr,
            tee_stdout=rank in tee_out and stdout not in ("", os.devnull),
            tee_stderr=rank in tee_err and stderr not in ("", os.devnull),
            error_file=errors[rank],
            return_file=os.path.join(folder, "return.pickle"),
        )
    return attempt_dir, files


@frozen
class LogsSpecs:
    """How a worker group's output is kept (torch's ``DefaultLogsSpecs``).

    Attributes:
        log_dir: the base folder; None means a fresh temporary folder.
        redirects: streams written to files only (one ``Std`` for all ranks, a per-rank dict or a
            spec string like ``"0:1,1:2"``).
        tee: streams written to files *and* copied, prefixed, to the agent's console.
        attempt: the attempt number or id (``3``, ``"r3"``) naming the attempt folder; None
            takes the workers' ``TORCHELASTIC_RESTART_COUNT`` as torch does, and the next free
            folder when that is taken.
        local_ranks_filter: when given (and not empty, as torch), only these local ranks reach the
            console; the others' teed streams go to their files only and their inherited streams
            to ``os.devnull`` (torchrun's ``--local-ranks-filter``). Log files are the same.
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    log_dir: str | None = None
    redirects: Std | int | str | dict[int, Std] = Std.NONE
    tee: Std | int | str | dict[int, Std] = Std.NONE
    local_ranks_filter: frozenset[int] | None = None
    attempt: int | str | None = field(default=None, kw_only=True)

    @property
    def root_log_dir(self) -> str:
        """The base folder of the logs ("" when a temporary one is made per attempt)."""
        return self.log_dir or ""

    def reify(self, envs: dict[int, dict[str, str]]) -> LogsDest:
        """Create the attempt folder for the workers ``envs`` describes (one per local rank)
        and return where each rank's output goes; each env gets its ``TORCHELASTIC_ERROR_FILE``.

        Raises:
            WorkerStartError: a bad redirect/tee spec, a bad attempt id, or a log_dir that is
                not a usable folder.
        """
        local_world_size = len(envs)
        redirects = to_map(self.redirects, local_world_size)
        tee = to_map(self.tee, local_world_size)
        attempt = self.attempt
        if attempt is None and envs:
            attempt = envs[min(envs)].get("TORCHELASTIC_RESTART_COUNT")
        attempt_dir = make_attempt_dir(self.log_dir, attempt)
        dest = LogsDest(attempt_dir=attempt_dir)
        for rank in range(local_world_size):
            folder = os.path.join(attempt_dir, str(rank))
            os.makedirs(folder)
            keep = redirects[rank] | tee[rank]
            shown = not self.local_ranks_filter or rank in self.local_ranks_filter
            hidden = "" if shown else os.devnull
            dest.stdouts[rank] = os.path.join(folder, "stdout.log") if keep & Std.OUT else hidden
            dest.stderrs[rank] = os.path.join(folder, "stderr.log") if keep & Std.ERR else hidden
            if shown and tee[rank] & Std.OUT:
                dest.tee_stdouts[rank] = dest.stdouts[rank]
            if shown and tee[rank] & Std.ERR:
                dest.tee_stderrs[rank] = dest.stderrs[rank]
            dest.error_files[rank] = os.path.join(folder, "error.json")
            if rank in envs:
                envs[rank]["TORCHELASTIC_ERROR_FILE"] = dest.error_files[rank]
        dest.filtered_stdout = os.path.join(attempt_dir, "filtered_stdout.log")
        dest.filtered_stderr = os.path.join(attempt_dir, "filtered_stderr.log")
        return dest


# Where ``tempfile.gettempdir`` looks, in its order (the current folder last).
_TEMP_VARS = ("TMPDIR", "TEMP", "TMP")
_TEMP_DIRS = ("/tmp", "/var/tmp", "/usr/tmp")


def make_temp_dir(prefix: str, places: list[str] | None = None) -> str:
    """Create a new private (0700) folder named ``prefix`` + random hex, as ``tempfile.mkdtemp``.

    Our own because importing ``tempfile`` (and through it ``shutil``, ``bz2``, ``lzma`` and
    ``random``) cost every launch about 2 ms before its workers could start (issue 5). Looks in
    ``$TMPDIR``, ``$TEMP``, ``$TMP``, ``/tmp``, ``/var/tmp``, ``/usr/tmp`` and the current
    folder, in that order (or only in ``places``), and takes the first where the folder can be
    made.

    Raises:
        WorkerStartError: no folder could be made in any of those places.
    """
    if places is None:
        places = [os.environ[v] for v in _TEMP_VARS if os.environ.get(v)] + list(_TEMP_DIRS)
        try:
            places.append(os.getcwd())
        except OSError:  # the current folder was removed
            places.append(os.curdir)
    last = ""
    for place in places:
        for _ in range(10):  # a name taken already: try another
            try:
                path = os.path.abspath(os.path.join(place, prefix + os.urandom(6).hex()))
                os.mkdir(path, 0o700)
                return path
            except FileExistsError:
                continue
            except OSError as err:
                last = f"{place}: {err.strerror}"
                break
    raise WorkerStartError(f"cannot create a temporary log folder ({last})")


_ATTEMPT_ID = re.compile(r"^[A-Za-z0-9_.-]+$")


def remove_tree(path: str) -> None:
    """Remove ``path`` and everything under it, as far as possible (``shutil.rmtree`` with
    ``ignore_errors``, without importing shutil on the launch path)."""
    for folder, dirs, files in os.walk(path, topdown=False):
        for name in files:
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass
        for name in dirs:
            full = os.path.join(folder, name)
            try:
                if os.path.islink(full):
                    os.unlink(full)
                else:
                    os.rmdir(full)
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass


_NOT_IN_NAMES = re.compile(r"[^A-Za-z0-9_.-]")


def _ensure_folder(log_dir: str) -> None:
    if os.path.exists(log_dir) and not os.path.isdir(log_dir):
        raise WorkerStartError(f"log_dir {log_dir!r} exists and is not a directory")
    try:
        os.makedirs(log_dir, exist_ok=True)
    except OSError as err:
        raise WorkerStartError(f"cannot create log_dir {log_dir!r}: {err.strerror}") from None


def make_run_dir(log_dir: str, run_id: str) -> str:
    """Create and return a new folder for one run under ``log_dir``: ``<run_id>_<random>``.

    Raises:
        WorkerStartError: ``log_dir`` is not a usable folder.
    """
    _ensure_folder(log_dir)
    stem = _NOT_IN_NAMES.sub("_", run_id)[:64] or "run"
    return make_temp_dir(f"{stem}_", places=[log_dir])


def make_attempt_dir(log_dir: str | None, attempt: int | str | None) -> str:
    """Create and return a new, empty attempt folder under ``log_dir``.

    Raises:
        WorkerStartError: ``log_dir`` exists but is not a folder, cannot be created, or
            ``attempt`` holds characters other than letters, digits, ``_``, ``.`` and ``-``.
    """
    if attempt is not None and not _ATTEMPT_ID.match(str(attempt)):
        raise WorkerStartError(f"invalid attempt id {attempt!r}: use letters, digits, _ . -")
    base = log_dir if log_dir is not None else make_temp_dir("tpelastic_")
    _ensure_folder(base)
    stem = f"attempt_{attempt}" if attempt is not None else None
    for n in range(100000):
        if stem is None:
            name = f"attempt_{n}"
        else:
            name = stem if n == 0 else f"{stem}.{n}"
        path = os.path.join(base, name)
        try:
            os.mkdir(path)  # atomic: two agents sharing a log_dir never get the same folder
            return path
        except FileExistsError:
            continue
    raise WorkerStartError(f"no free attempt folder under {base!r}")


DefaultLogsSpecs = LogsSpecs
"""torch's name for the default layout: :class:`LogsSpecs` itself."""


__all__ = [
    "DefaultLogsSpecs",
    "LogsDest",
    "LogsSpecs",
    "RankFiles",
    "make_attempt_dir",
    "make_run_dir",
    "make_temp_dir",
    "rank_files",
    "remove_tree",
]
