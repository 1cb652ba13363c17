"""argparse's parser for ``tpelastic run``: every torchrun 2.13 flag, then ours.

torchrun's flags keep torchrun's spellings (dash and underscore), defaults and environment
defaults: a value flag reads ``PET_<DEST>`` (``PET_NPROC_PER_NODE``), a switch is on when
``bool(int(PET_<DEST>))`` is (``PET_STANDALONE=2`` is on); ``TPELASTIC_<DEST>`` is read first.
``--logs-specs`` and ``--numa-binding`` read no variable, as in torchrun. Values are kept as the
text given; :func:`tpelastic.cli.run.config_from_args` checks each one (type and range) and says
what is wrong in one line.

Unique abbreviations work as argparse allows (``--nproc-per 2``), a prefix of both spellings of
one flag included (``--nproc``, as Python 3.12's argparse; 3.11's calls it ambiguous); where one
of our own flags makes a torchrun abbreviation ambiguous (``--event`` would also match
``--events``), the torchrun flag wins, so a torchrun command line keeps its meaning.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, NoReturn

from tpelastic.cli.errors import UsageError

PROG = "tpelastic run"

# torchrun 2.13's flags: (spellings, default, help). A default of None for a switch means off.
# The environment variable comes from the first long spelling's dest, as torchrun's ``env``.
_TORCHRUN_VALUES: tuple[tuple[tuple[str, ...], str | None, str], ...] = (
    (("--nnodes",), "1:1", "number of nodes, or MIN:MAX"),
    (("--nproc-per-node", "--nproc_per_node"), "1", "workers per node: N, auto, cpu, gpu, xpu"),
    (("--rdzv-backend", "--rdzv_backend"), "static", "static, c10d (tcp, p10d), file, etcd, ..."),
    (("--rdzv-endpoint", "--rdzv_endpoint"), "", "host[:port] of the rendezvous store"),
    (("--rdzv-id", "--rdzv_id"), "none", "the job's run id (the same on every node)"),
    (("--rdzv-conf", "--rdzv_conf"), "", "backend options k=v,k2=v2"),
    (("--max-restarts", "--max_restarts"), "0", "job-wide restarts after worker failures"),
    (("--monitor-interval", "--monitor_interval"), "0.1", "seconds between checks of workers"),
    (("--start-method", "--start_method"), "spawn", "spawn, fork or forkserver"),
    (("--event-log-handler", "--event_log_handler"), "null", "agent events: null, console, ..."),
    (("--role",), "default", "the workers' role name"),
    (("--log-dir", "--log_dir"), None, "base folder for worker logs ('' for a temp folder)"),
    (("-r", "--redirects"), "0", "0-3 or rank:N,... to log files only"),
    (("-t", "--tee"), "0", "0-3 or rank:N,... to log files and console"),
    (("--local-ranks-filter", "--local_ranks_filter"), "", "show only these ranks on the console"),
    (("--duplicate-stdout-filters", "--duplicate_stdout_filters"), None, "copy lines with these"),
    (("--duplicate-stderr-filters", "--duplicate_stderr_filters"), None, "copy lines with these"),
    (("--node-rank", "--node_rank"), "0", "this node's rank (static backend)"),
    (("--master-addr", "--master_addr"), None, "rank 0's host (static backend; 127.0.0.1)"),
    (("--master-port", "--master_port"), None, "rank 0's port (static backend; 29500)"),
    (("--local-addr", "--local_addr"), None, "this node's address for peers"),
    (
        ("--signals-to-handle", "--signals_to_handle"),
        "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
        "signals that stop the agent and its workers",
    ),
    (("--shutdown-timeout", "--shutdown_timeout"), None, "seconds from SIGTERM to SIGKILL"),
)
_TORCHRUN_SWITCHES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("--standalone",), "one node: rendezvous store hosted here, random run id"),
    (("-m", "--module"), "run the script as a module (python -m)"),
    (("--no-python", "--no_python"), "run the script as a program"),
    (("--run-path", "--run_path"), "run the script with runpy.run_path"),
    (("--virtual-local-rank", "--virtual_local_rank"), "LOCAL_RANK 0 for every worker"),
)
# torchrun reads no environment variable for these two.
_TORCHRUN_PLAIN: tuple[tuple[tuple[str, ...], str], ...] = (
    (("--logs-specs", "--logs_specs"), "a torchrun.logs_specs entry point name"),
    (("--numa-binding", "--numa_binding"), "node, socket, exclusive or core-complex"),
)
NUMA_MODES = ("node", "socket", "exclusive", "core-complex")

# tpelastic's own flags (not in torchrun), read the same way.
_OWN_VALUES: tuple[tuple[tuple[str, ...], str | None, str], ...] = (
    (("--rdzv-timeout", "--rdzv_timeout"), None, "join timeout in seconds"),
    (("--exit-barrier-timeout", "--exit_barrier_timeout"), "300", "seconds to wait for peers"),
    (("--events",), None, "agent events: null, console, logging, jsonl:PATH"),
    (("--events-file", "--events_file"), None, "agent events as JSON lines to PATH"),
    (("--metrics",), None, "agent metrics: null, console or logging"),
    (
        ("--metrics-port", "--metrics_port", "--metrics-addr", "--metrics_addr"),
        None,
        "[HOST:]PORT: /metrics and /health",
    ),
    (("--stall-timeout", "--stall_timeout"), None, "seconds without progress: worker stuck"),
    (
        ("--stall-first-step-timeout", "--stall_first_step_timeout"),
        None,
        "the same before the first step",
    ),
    (
        ("--health-port", "--health_port", "--health-addr", "--health_addr"),
        None,
        "[HOST:]PORT: GET /health (JSON)",
    ),
    (
        ("--log-timestamps", "--log_timestamps"),
        "auto",
        "time-stamp the agent's lines: on, off, auto (on when stderr is no terminal)",
    ),
    (
        ("--warm-workers", "--warm_workers"),
        "on",
        "start workers from interpreters that imported tensorplay already: on, off",
    ),
)
_OWN_SWITCHES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("--timers",), "let workers use tpelastic.timer.expires"),
)

TORCHRUN_FLAGS = frozenset(
    spelling
    for group in (_TORCHRUN_VALUES, _TORCHRUN_SWITCHES, _TORCHRUN_PLAIN)
    for spellings, *_rest in group
    for spelling in spellings
)


def env_default(dest: str, given: str | None) -> str | None:
    """A value flag's default: ``TPELASTIC_<DEST>``, else ``PET_<DEST>``, else inside a Slurm
    allocation of several nodes what Slurm says (:mod:`tpelastic.cli.slurm`), else ``given``."""
    key = dest.upper()
    for prefix in ("TPELASTIC_", "PET_"):
        if f"{prefix}{key}" in os.environ:
            return os.environ[f"{prefix}{key}"]
    if "SLURM_JOB_ID" in os.environ or "SLURM_JOBID" in os.environ:
        from tpelastic.cli.slurm import slurm_defaults

        return slurm_defaults().get(dest, given)
    return given


def env_switch(dest: str) -> bool:
    """A switch's default, as torchrun's ``check_env``: ``bool(int(PET_<DEST>))``.

    Raises:
        UsageError: the variable is set to something that is not an integer.
    """
    for prefix in ("TPELASTIC_", "PET_"):
        name = f"{prefix}{dest.upper()}"
        if name in os.environ:
            try:
                return bool(int(os.environ[name]))
            except ValueError:
                raise UsageError(
                    f"{name} must be an integer (0 is off), got {os.environ[name]!r}"
                ) from None
    return False


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)

    def _get_option_tuples(self, option_string: str) -> list[Any]:
        # A prefix shared by the two spellings of one flag names that flag (as argparse does
        # from Python 3.12 on); a prefix that names exactly one torchrun flag means that flag,
        # whatever of ours it also matches.
        found = super()._get_option_tuples(option_string)
        if len({id(t[0]) for t in found}) <= 1:
            return found[:1]
        torchrun = [t for t in found if t[1] in TORCHRUN_FLAGS]
        if len({id(t[0]) for t in torchrun}) == 1:
            return torchrun[:1]
        return found


def _columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size`` finds it ($COLUMNS, stdout, 80)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _Formatter(argparse.HelpFormatter):
    """argparse's help, with the width found without importing ``shutil``.

    argparse makes a formatter for every flag added and, given no width, imports ``shutil``
    (with ``bz2`` and ``lzma``) to ask the terminal's: about 1.5 ms of every launch.
    """

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        width = _columns() - 2 if width is None else width
        super().__init__(prog, indent_increment, max_help_position, width)


def _dest(spellings: tuple[str, ...]) -> str:
    long = next(s for s in spellings if s.startswith("--"))
    return long[2:].replace("-", "_")


def build_parser() -> argparse.ArgumentParser:
    """argparse's parser of ``tpelastic run``: the flags, the script, and the script's
    arguments (everything after it, untouched).

    Raises:
        UsageError: a switch's environment variable is not an integer.
    """
    parser = _Parser(
        prog=PROG,
        description="Launch one node's elastic agent (torchrun's flags).",
        formatter_class=_Formatter,
    )
    for spellings, given, text in (*_TORCHRUN_VALUES, *_OWN_VALUES):
        dest = _dest(spellings)
        parser.add_argument(*spellings, dest=dest, default=env_default(dest, given), help=text)
    for spellings, text in (*_TORCHRUN_SWITCHES, *_OWN_SWITCHES):
        dest = _dest(spellings)
        parser.add_argument(
            *spellings, dest=dest, action="store_true", default=env_switch(dest), help=text
        )
    for spellings, text in _TORCHRUN_PLAIN:
        parser.add_argument(*spellings, dest=_dest(spellings), default=None, help=text)
    parser.add_argument("training_script", help="the script (or module, or program) to run")
    parser.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return parser


__all__ = ["NUMA_MODES", "PROG", "TORCHRUN_FLAGS", "build_parser", "env_default", "env_switch"]
