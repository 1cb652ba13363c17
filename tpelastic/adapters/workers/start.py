"""start_processes: check the request, lay out the logs, start the right kind of context.

Every check happens before anything starts, and each failure is one ``WorkerStartError`` line
naming the problem: a script or command that does not exist or cannot be executed, an
unpicklable callable, an unknown start method, a bad redirect spec, mismatched args/envs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tpelastic.adapters.workers.api import Std, WorkerStartError
from tpelastic.adapters.workers.context import PContext
from tpelastic.adapters.workers.logs import LogsSpecs
from tpelastic.adapters.workers.subprocess_context import SubprocessContext

if TYPE_CHECKING:
    from tpelastic.adapters.workers.warm import WarmPool

START_METHODS = ("spawn", "fork", "forkserver")
# Interpreter options that take a value, so the script path is the argument after it.
_PY_OPTS_WITH_VALUE = {"-W", "-X", "--check-hash-based-pycs"}


def _check_executable(entrypoint: str) -> None:
    if not entrypoint:
        raise WorkerStartError("entrypoint is empty")
    if os.sep in entrypoint:
        if not os.path.isfile(entrypoint):
            raise WorkerStartError(f"entrypoint {entrypoint!r} does not exist")
        if not os.access(entrypoint, os.X_OK):
            raise WorkerStartError(f"entrypoint {entrypoint!r} is not executable")
    elif _which(entrypoint) is None:
        raise WorkerStartError(f"entrypoint {entrypoint!r} is not an executable on PATH")


def _which(name: str) -> str | None:
    import shutil  # not needed for ``sys.executable`` (a path), the usual entrypoint

    return shutil.which(name)


def _check_python_script(entrypoint: str, args: tuple[str, ...]) -> None:
    """For ``python [opts] script.py ...``, check that script.py exists."""
    if not os.path.basename(entrypoint).startswith("python"):
        return
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-m", "-c", "-") or arg.startswith(("-m", "-c")):
            return  # a module, inline code or stdin: nothing on disk to check
        if arg in _PY_OPTS_WITH_VALUE:
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        if not os.path.isfile(arg):
            raise WorkerStartError(f"script {arg!r} does not exist")
        return
    return


def _check_callable(fn: Callable[..., Any], args: Mapping[int, Any], method: str) -> None:
    # Only callables need these; a job of commands does not pay for importing them.
    import multiprocessing
    import pickle

    if method not in START_METHODS:
        raise WorkerStartError(f"unknown start method {method!r}: use one of {START_METHODS}")
    if method not in multiprocessing.get_all_start_methods():
        raise WorkerStartError(f"start method {method!r} is not available on this platform")
    for rank, value in args.items():
        if not isinstance(value, tuple):
            raise WorkerStartError(f"args[{rank}] must be a tuple, got {type(value).__name__}")
    if method == "fork":
        return  # fork copies the function; nothing is pickled
    try:
        pickle.dumps(fn)
    except Exception as err:
        raise WorkerStartError(f"entrypoint {fn!r} cannot be pickled for {method}: {err}") from None


def _check_envs(envs: Mapping[int, Mapping[str, str]]) -> dict[int, dict[str, str]]:
    if not envs:
        raise WorkerStartError("envs is empty: there must be at least one worker")
    if sorted(envs) != list(range(len(envs))):
        raise WorkerStartError(f"envs keys must be local ranks 0..{len(envs) - 1}")
    return {rank: {str(k): str(v) for k, v in env.items()} for rank, env in envs.items()}


def _command_args(args: Any, envs: Mapping[int, Any]) -> dict[int, tuple[str, ...]]:
    """A command's arguments per rank: one shared tuple, or a dict of one tuple per rank."""
    if isinstance(args, Mapping):
        if sorted(args) != sorted(envs):
            raise WorkerStartError("args must hold one tuple per local rank, like envs")
        return {rank: tuple(str(a) for a in args[rank]) for rank in envs}
    if isinstance(args, str):
        raise WorkerStartError(f"args must be a tuple of arguments, not the string {args!r}")
    shared = tuple(str(a) for a in (args or ()))
    return {rank: shared for rank in envs}


def start_processes(
    name: str,
    entrypoint: Callable[..., Any] | str,
    args: Any,
    envs: Mapping[int, Mapping[str, str]],
    logs_specs: Any = None,
    log_line_prefixes: dict[int, str] | None = None,
    start_method: str = "spawn",
    numa_options: Any = None,
    duplicate_stdout_filters: list[str] | None = None,
    duplicate_stderr_filters: list[str] | None = None,
    *,
    log_dir: str | None = None,
    redirects: Std | int | str | dict[int, Std] = Std.NONE,
    tee: Std | int | str | dict[int, Std] = Std.NONE,
    attempt: int | str | None = None,
    local_ranks_filter: frozenset[int] | None = None,
    warm: WarmPool | None = None,
) -> PContext:
    """Start ``len(envs)`` workers and return their running context (torch's signature).

    Args:
        name: the role name (prefix of teed lines, ``[name0]:``).
        entrypoint: a command (str: subprocess workers) or a callable (multiprocessing workers).
        args: for a callable, a dict with one tuple per local rank; for a command, either one
            tuple shared by every rank or such a dict (torchrun's form).
        envs: per local rank ``0..n-1``, the variables added to that worker's environment.
        logs_specs: where output goes (a :class:`LogsSpecs`, or any object whose
            ``reify(envs)`` returns torch's ``LogsDest`` fields); when given, the keyword-only
            ``log_dir``/``redirects``/``tee``/``attempt``/``local_ranks_filter`` must be left
            at their defaults, which otherwise make the ``LogsSpecs``.
        log_line_prefixes: per local rank, the prefix of its teed lines.
        start_method: for callables: ``spawn`` (default), ``fork`` or ``forkserver``.
        warm: warm interpreters to start command workers from (see ``warm.py``); None (the
            default here; the agent passes its own) starts them plainly.
        numa_options: a NUMA binding mode (``node``, ``socket``, ``exclusive``,
            ``core-complex``) or torch's ``NumaOptions``; None binds nothing.
        duplicate_stdout_filters, duplicate_stderr_filters: teed lines holding any of these
            are also written to the attempt's ``filtered_stdout.log``/``filtered_stderr.log``.

    Returns:
        The started ``PContext``; ``ctx.attempt_dir`` names the new attempt folder.

    Raises:
        WorkerStartError: bad input, before any worker starts (one line naming the problem).
        OSError: the OS refused to start a worker; workers already started are stopped first.
    """
    clean_envs = _check_envs(envs)
    if logs_specs is None:
        logs_specs = LogsSpecs(
            log_dir=log_dir,
            redirects=redirects,
            tee=tee,
            attempt=attempt,
            local_ranks_filter=local_ranks_filter,
        )
    elif (
        log_dir is not None
        or attempt is not None
        or redirects != Std.NONE
        or tee != Std.NONE
        or local_ranks_filter is not None
    ):
        raise WorkerStartError("give either logs_specs or log_dir/redirects/tee/attempt, not both")
    if numa_options is not None:
        from tpelastic.adapters.workers.numa import NumaError, mode_name

        try:
            mode_name(numa_options)
        except NumaError as err:
            raise WorkerStartError(str(err)) from None
    extras = (log_line_prefixes, numa_options, duplicate_stdout_filters, duplicate_stderr_filters)
    ctx: PContext
    if isinstance(entrypoint, str):
        per_rank_args = _command_args(args, clean_envs)
        _check_executable(entrypoint)
        for rank_args in per_rank_args.values():
            _check_python_script(entrypoint, rank_args)
        ctx = SubprocessContext(
            name, entrypoint, per_rank_args, clean_envs, logs_specs, *extras, warm=warm
        )
    elif callable(entrypoint):
        per_rank = dict(args or {})
        if sorted(per_rank) != sorted(clean_envs):
            raise WorkerStartError("args must hold one tuple per local rank, like envs")
        _check_callable(entrypoint, per_rank, start_method)
        from tpelastic.adapters.workers.multiprocessing_context import MultiprocessContext

        ctx = MultiprocessContext(
            name, entrypoint, per_rank, clean_envs, start_method, logs_specs, *extras
        )
    else:
        raise WorkerStartError(f"entrypoint must be a command string or a callable: {entrypoint!r}")
    ctx.start()
    return ctx


__all__ = ["START_METHODS", "start_processes"]
