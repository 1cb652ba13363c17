"""``tpelastic run`` (also ``python -m tpelastic.run``): launch one node's agent, torchrun-style.

Flags are torchrun's, in dash and underscore spellings; each also reads a default from the
environment (``TPELASTIC_<FLAG>`` first, then torchrun's ``PET_<FLAG>``, e.g. ``PET_NNODES``).
Everything after the script is handed to it untouched, dashes included. Bad input is one line
on stderr and exit code 2; see docs/launcher.md for the other exit codes.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tpelastic.cli.errors import UsageError, exit_with
from tpelastic.cli.run_flags import quick_parse

if TYPE_CHECKING:
    import argparse
    from types import SimpleNamespace

    # What the command line parses to: argparse's namespace, or run_flags.quick_parse's with
    # the same attributes.
    Namespace = argparse.Namespace | SimpleNamespace

PROG = "tpelastic run"
_RUN_PATH_CODE = (
    "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def build_parser() -> argparse.ArgumentParser:
    """argparse's parser of ``tpelastic run`` (see :mod:`tpelastic.cli.run_parser`)."""
    from tpelastic.cli import run_parser  # only for help, errors and unusual command lines

    return run_parser.build_parser()


def parse_args(argv: Sequence[str]) -> Any:
    """The flags, script and script arguments of ``argv`` (without the ``run`` word).

    A plain command line is read without argparse (:func:`run_flags.quick_parse`); anything
    else, ``--help`` included, goes to argparse's parser.

    Raises:
        UsageError: argparse's one-line error (an unknown flag, a missing value or script).
        SystemExit: after printing ``--help``.
    """
    quick = quick_parse(argv)
    return quick if quick is not None else build_parser().parse_args(list(argv))


def add_parser(commands: argparse._SubParsersAction, name: str) -> None:  # type: ignore[type-arg]
    # Listed for ``tpelastic --help``; ``main`` hands ``run`` to :func:`main` before argparse,
    # so that script arguments and one-line errors are handled here.
    commands.add_parser(name, help="launch one node's elastic agent (torchrun-compatible flags)")


def run(args: argparse.Namespace) -> int:  # pragma: no cover - main dispatches ``run`` early
    return main([])


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tpelastic run`` with ``argv`` (without the ``run`` word); returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["run"]:
        args = args[1:]
    try:
        return _launch(parse_args(args))
    except UsageError as error:
        return exit_with(error, PROG)


def _launch(ns: Namespace) -> int:
    config = config_from_args(ns)
    entrypoint, cmd_args = entrypoint_from_args(ns)
    from tpelastic.adapters.workers import deathsig

    deathsig.start_probe()  # runs while the agent imports and joins, not when workers start
    _setup_logging()
    from tpelastic.adapters.launcher.config import ConfigError
    from tpelastic.adapters.launcher.launch import run_agent
    from tpelastic.adapters.rendezvous.errors import RendezvousError
    from tpelastic.adapters.workers.api import WorkerStartError
    from tpelastic.adapters.workers.signals import SignalException

    _resume_collection()
    try:
        result = run_agent(config, entrypoint, cmd_args)
    except (ConfigError, WorkerStartError) as error:
        raise UsageError(str(error)) from None
    except RendezvousError as error:
        print(f"{PROG}: rendezvous failed: {error}", file=sys.stderr)
        return 3
    except SignalException as stop:  # a second signal while the first one was being handled
        print(f"{PROG}: interrupted by signal {int(stop.sigval)}", file=sys.stderr)
        return 128 + int(stop.sigval)
    return result.exit_code


def _resume_collection() -> None:
    """Turn the garbage collector back on if an entry point paused it for the imports.

    What the imports created lives as long as the agent: frozen, later collections skip it.
    The agent can run for days, so the collector must not stay off.
    """
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def _setup_logging() -> None:
    logger = logging.getLogger("tpelastic")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[tpelastic] %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(os.environ.get("TPELASTIC_LOG_LEVEL", "INFO").upper())


def standalone_run_id() -> str:
    """A fresh run id for ``--standalone``."""
    return os.urandom(6).hex()  # 12 hex digits, as before, without importing uuid


def find_program(name: str) -> str | None:
    """The program ``name`` as ``--no-python`` would run it, or None when it is not found."""
    if os.sep in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    import shutil  # only ``--no-python`` with a bare program name needs it

    return shutil.which(name)


def _int(flag: str, text: object, low: int) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise UsageError(f"--{flag} must be an integer, got {text!r}") from None
    if value < low:
        raise UsageError(f"--{flag} must be >= {low}, got {value}")
    return value


def _float(flag: str, text: object) -> float:
    try:
        value = float(str(text).strip())
    except ValueError:
        raise UsageError(f"--{flag} must be a number of seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise UsageError(f"--{flag} must be a positive number of seconds, got {text!r}")
    return value


def parse_nnodes(text: str) -> tuple[int, int]:
    """``N`` or ``MIN:MAX`` as (min, max).

    Raises:
        UsageError: not that form, a number < 1, or MIN > MAX.
    """
    low, colon, high = str(text).partition(":")
    first = _int("nnodes", low, 1)
    last = _int("nnodes", high, 1) if colon else first
    if first > last:
        raise UsageError(f"--nnodes {text}: MIN ({first}) is greater than MAX ({last})")
    return first, last


def parse_nproc(text: str) -> int:
    """``N``, ``cpu`` (the CPU count), ``gpu`` or ``auto`` (GPUs if any, else CPUs).

    Raises:
        UsageError: anything else, or a number < 1.
    """
    word = str(text).strip().lower()
    if word in ("cpu", "auto", "gpu"):
        gpus = _gpu_count() if word != "cpu" else 0
        if word == "gpu" and gpus == 0:
            raise UsageError("--nproc-per-node gpu: no GPU is available")
        return gpus or os.cpu_count() or 1
    return _int("nproc-per-node", text, 1)


def _gpu_count() -> int:
    try:
        import tensorplay  # only for auto/gpu: it is slow to import

        return int(tensorplay.cuda.device_count()) if tensorplay.cuda.is_available() else 0
    except Exception:
        return 0


def config_from_args(ns: Namespace) -> Any:
    """The LaunchConfig that the parsed flags describe.

    Raises:
        UsageError: any bad flag value, in one line naming the flag.
    """
    from tpelastic.adapters.launcher.checks import free_port
    from tpelastic.adapters.launcher.config import ConfigError, LaunchConfig
    from tpelastic.adapters.rendezvous.parameters import parse_rdzv_conf

    min_nodes, max_nodes = parse_nnodes(ns.nnodes)
    backend, endpoint, run_id = ns.rdzv_backend, ns.rdzv_endpoint, ns.rdzv_id
    local_addr = ns.local_addr
    if ns.standalone:
        backend, endpoint, run_id = "tcp", f"127.0.0.1:{free_port()}", standalone_run_id()
        local_addr = local_addr or "127.0.0.1"
    elif backend == "static" and not endpoint:
        if max_nodes > 1:
            raise UsageError("the static backend needs --rdzv-endpoint host:port for several nodes")
        endpoint = f"127.0.0.1:{free_port()}"  # one node: its own store, on loopback
        local_addr = local_addr or "127.0.0.1"
    try:
        conf: dict[str, Any] = parse_rdzv_conf(ns.rdzv_conf)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if backend == "static":
        conf.setdefault("rank", _int("node-rank", ns.node_rank, 0))
    master_port = _int("master-port", ns.master_port, 1) if ns.master_port else None
    if master_port is not None and master_port > 65535:
        raise UsageError(f"--master-port must be in 1..65535, got {master_port}")
    nproc = parse_nproc(ns.nproc_per_node)
    redirects, tee = _streams(ns, nproc)
    metrics_host, metrics_port = parse_bind("metrics-port", ns.metrics_port)
    health_host, health_port = parse_bind("health-port", ns.health_port)
    try:
        return LaunchConfig(
            min_nodes=min_nodes,
            max_nodes=max_nodes,
            nproc_per_node=nproc,
            run_id=run_id,
            role=ns.role,
            rdzv_endpoint=endpoint,
            rdzv_backend=backend,
            rdzv_configs=conf,
            rdzv_timeout=_float("rdzv-timeout", ns.rdzv_timeout) if ns.rdzv_timeout else None,
            max_restarts=_int("max-restarts", ns.max_restarts, 0),
            monitor_interval=_float("monitor-interval", ns.monitor_interval),
            start_method=ns.start_method,
            log_dir=ns.log_dir,
            redirects=redirects,
            tee=tee,
            local_addr=local_addr,
            master_addr=ns.master_addr or ("127.0.0.1" if master_port else None),
            master_port=master_port,
            exit_barrier_timeout=_float("exit-barrier-timeout", ns.exit_barrier_timeout),
            events=_events(ns),
            standalone=bool(ns.standalone),
            metrics_cfg={"tpelastic": ns.metrics} if ns.metrics else {},
            metrics_host=metrics_host,
            metrics_port=metrics_port,
            timers=bool(ns.timers),
            stall_timeout=_float("stall-timeout", ns.stall_timeout) if ns.stall_timeout else None,
            stall_first_step_timeout=_optional_float(
                "stall-first-step-timeout", ns.stall_first_step_timeout
            ),
            health_host=health_host,
            health_port=health_port,
        )
    except ConfigError as error:
        raise UsageError(str(error)) from None


def _events(ns: Namespace) -> str:
    if not ns.events_file:
        return str(ns.events)
    if ns.events != "null":
        raise UsageError("use one of --events and --events-file")
    return f"jsonl:{ns.events_file}"


def _optional_float(flag: str, text: object) -> float | None:
    return None if text is None or str(text).strip() == "" else _float(flag, text)


def _port(flag: str, text: object) -> int | None:
    if text is None or str(text).strip() == "":
        return None
    port = _int(flag, text, 1)
    if port > 65535:
        raise UsageError(f"--{flag} must be in 1..65535, got {port}")
    return port


def parse_bind(flag: str, text: object) -> tuple[str, int | None]:
    """``PORT`` (on 127.0.0.1), ``HOST:PORT``, ``[V6]:PORT`` or ``:PORT`` (every address).

    Raises:
        UsageError: a malformed value or a port outside 1..65535, naming the flag.
    """
    value = "" if text is None else str(text).strip()
    if not value:
        return "127.0.0.1", None
    host, sep, port = value.rpartition(":")
    if not sep:
        return "127.0.0.1", _port(flag, value)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise UsageError(f"--{flag}: write an IPv6 address in brackets, e.g. [::1]:9100")
    if not port.strip():
        raise UsageError(f"--{flag} {value!r}: no port after the host (HOST:PORT)")
    return host or "0.0.0.0", _port(flag, port)


def _streams(ns: Namespace, nproc: int) -> tuple[Any, Any]:
    from tpelastic.adapters.workers.api import Std, WorkerStartError

    try:
        redirects, tee = Std.from_str(str(ns.redirects)), Std.from_str(str(ns.tee))
    except WorkerStartError as error:
        raise UsageError(str(error)) from None
    if not ns.local_ranks_filter:
        return redirects, tee
    shown = {_int("local-ranks-filter", r, 0) for r in str(ns.local_ranks_filter).split(",")}
    # Shown ranks are teed (to files and the console); the others only go to their files.
    chosen = tee if isinstance(tee, Std) and tee else Std.ALL
    if max(shown) >= nproc:
        raise UsageError(f"--local-ranks-filter names local rank {max(shown)} of {nproc} workers")
    return {r: Std.ALL for r in range(nproc) if r not in shown}, {r: chosen for r in shown}


def entrypoint_from_args(ns: Namespace) -> tuple[str, list[str]]:
    """The command and arguments each worker runs.

    Raises:
        UsageError: the script or program does not exist, or incompatible flags.
    """
    script, rest = ns.training_script, list(ns.training_script_args)
    if sum(map(bool, (ns.module, ns.no_python, ns.run_path))) > 1:
        raise UsageError("use at most one of --module, --no-python and --run-path")
    if ns.no_python:
        if find_program(script) is None:
            raise UsageError(f"program {script!r} was not found or is not executable")
        return script, rest
    if ns.module:
        return sys.executable, ["-u", "-m", script, *rest]
    if not os.path.isfile(script):
        raise UsageError(f"script {script!r} does not exist")
    if ns.run_path:
        return sys.executable, ["-u", "-c", _RUN_PATH_CODE, script, *rest]
    return sys.executable, ["-u", script, *rest]


__all__ = [
    "PROG",
    "build_parser",
    "config_from_args",
    "entrypoint_from_args",
    "main",
    "parse_nnodes",
    "parse_nproc",
]
