"""``tpelastic run`` (also ``python -m tpelastic.run``): launch one node's agent, torchrun-style.

Flags are torchrun 2.13's (both spellings, unique abbreviations, ``PET_*`` defaults read as
torchrun reads them; see :mod:`tpelastic.cli.run_parser`), then ours. Everything after the
script is handed to it untouched, dashes included. Bad input is one line on stderr and exit
code 2, before anything starts; see docs/launcher.md for the other exit codes.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tpelastic.cli.errors import UsageError, exit_with

if TYPE_CHECKING:
    import argparse

    Namespace = argparse.Namespace

PROG = "tpelastic run"
_RUN_PATH_CODE = (
    "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def build_parser() -> argparse.ArgumentParser:
    """argparse's parser of ``tpelastic run`` (see :mod:`tpelastic.cli.run_parser`)."""
    from tpelastic.cli import run_parser

    return run_parser.build_parser()


def parse_args(argv: Sequence[str]) -> Any:
    """The flags, script and script arguments of ``argv`` (without the ``run`` word).

    Raises:
        UsageError: argparse's one-line error (an unknown flag, a missing value or script).
        SystemExit: after printing ``--help``.
    """
    return build_parser().parse_args(list(argv))


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
    # First: the checks below may already print a console line.
    _setup_logging(_timestamps(getattr(ns, "log_timestamps", "auto")))
    config = config_from_args(ns)
    entrypoint, cmd_args = entrypoint_from_args(ns)
    from tpelastic.adapters.workers import deathsig

    deathsig.start_probe()  # runs while the agent imports and joins, not when workers start
    from tpelastic.adapters.launcher.config import ConfigError
    from tpelastic.adapters.launcher.exit_guard import ExitGuard
    from tpelastic.adapters.launcher.launch import run_agent
    from tpelastic.adapters.rendezvous.errors import RendezvousError
    from tpelastic.adapters.workers.api import WorkerStartError
    from tpelastic.adapters.workers.signals import SignalException

    _resume_collection()
    try:
        # Once the outcome is in, the agent's teardown ends within seconds, stuck or not.
        guard = ExitGuard()
        try:
            result = run_agent(config, entrypoint, cmd_args, on_outcome=guard.arm)
        finally:
            guard.disarm()
    except (ConfigError, WorkerStartError) as error:
        raise UsageError(str(error)) from None
    except RendezvousError as error:
        print(f"{PROG}: rendezvous failed: {error}", file=sys.stderr)
        return 3
    except SignalException as stop:  # a stop that came before the agent's loop could take it
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


def _timestamps(value: object) -> bool:
    """``--log-timestamps``: on, off, or auto (on when stderr is not a terminal: a log file)."""
    text = str(value or "auto").strip().lower()
    if text in ("on", "1", "true", "yes"):
        return True
    if text in ("off", "0", "false", "no"):
        return False
    if text != "auto":
        raise UsageError(f"--log-timestamps must be on, off or auto, got {value!r}")
    try:
        return not sys.stderr.isatty()
    except (AttributeError, ValueError):
        return True


class _CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time of each line, not at setup."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def _setup_logging(timestamps: bool = False) -> None:
    logger = logging.getLogger("tpelastic")
    if not logger.handlers:
        handler = _CurrentStderr()
        # ISO 8601 local time with milliseconds: lines of several nodes' logs sort together.
        stamp = "%(asctime)s.%(msecs)03d " if timestamps else ""
        handler.setFormatter(
            logging.Formatter(f"{stamp}[tpelastic] %(message)s", datefmt="%Y-%m-%dT%H:%M:%S")
        )
        from tpelastic.adapters.sinks.console_lines import RepeatCollapser

        handler.addFilter(RepeatCollapser())
        logger.addHandler(handler)
    logger.setLevel(os.environ.get("TPELASTIC_LOG_LEVEL", "INFO").upper())


def standalone_run_id() -> str:
    """A fresh run id for ``--standalone`` (and a one-node job given no endpoint)."""
    return os.urandom(6).hex()  # 12 hex digits, without importing uuid


def find_program(name: str) -> str | None:
    """The program ``name`` as ``--no-python`` would run it, or None when it is not found."""
    if os.sep in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    import shutil  # only ``--no-python`` with a bare program name needs it

    return shutil.which(name)


# The largest counts a flag may hold: beyond them a store or a timer overflows somewhere.
MAX_COUNT = 2**31 - 1


def _int(flag: str, text: object, low: int, high: int = MAX_COUNT) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise UsageError(f"--{flag} must be an integer, got {text!r}") from None
    if value < low and high == MAX_COUNT:
        raise UsageError(f"--{flag} must be >= {low}, got {value}")
    if not low <= value <= high:
        raise UsageError(f"--{flag} must be in {low}..{high}, got {value}")
    return value


def _float(flag: str, text: object) -> float:
    from tpelastic.adapters.launcher.config import MAX_SECONDS

    try:
        value = float(str(text).strip())
    except ValueError:
        raise UsageError(f"--{flag} must be a number of seconds, got {text!r}") from None
    if not 0 < value <= MAX_SECONDS:
        raise UsageError(
            f"--{flag} must be a positive number of seconds up to {MAX_SECONDS:g}, got {text!r}"
        )
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
    """``N``, ``cpu`` (the CPUs this process may use), ``gpu``, ``xpu``, or ``auto`` (the
    accelerators if any, else the CPUs), as torchrun; at most :func:`max_workers`.

    Raises:
        UsageError: anything else, no such device, or a number out of range.
    """
    word = str(text).strip()
    if word in ("cpu", "auto", "gpu", "xpu"):
        count = _device_count(word)
        if word in ("gpu", "xpu") and count == 0:
            raise UsageError(f"--nproc-per-node {word}: no {word.upper()} is available")
        if count == 0:
            count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
        return count or os.cpu_count() or 1
    try:
        nproc = int(word)
    except ValueError:
        raise UsageError(
            f"--nproc-per-node must be an integer, auto, cpu, gpu or xpu, got {text!r}"
        ) from None
    if nproc < 1:
        raise UsageError(f"--nproc-per-node must be >= 1, got {nproc}")
    most = max_workers()
    if nproc > most:
        raise UsageError(
            f"--nproc-per-node {nproc}: this machine can run at most {most} workers "
            f"(its process limit and {_WORKER_MEMORY >> 20} MiB of available memory each)"
        )
    return nproc


_WORKER_MEMORY = 32 << 20  # the least a Python worker needs


def max_workers() -> int:
    """The most workers this machine can start: the process limit and the memory available."""
    import resource

    most = MAX_COUNT
    soft, _hard = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft != resource.RLIM_INFINITY:
        most = min(most, soft)
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        free = 0
    if free > 0:
        most = min(most, max(1, free // _WORKER_MEMORY))
    return max(1, most)


def _device_count(word: str) -> int:
    """GPUs (``gpu``), XPUs (``xpu``) or any accelerator (``auto``) that tensorplay sees."""
    if word == "cpu":
        return 0
    try:
        import tensorplay  # only for auto/gpu/xpu: it is slow to import

        if word == "xpu":
            xpu = getattr(tensorplay, "xpu", None)
            return int(xpu.device_count()) if xpu is not None and xpu.is_available() else 0
        return int(tensorplay.cuda.device_count()) if tensorplay.cuda.is_available() else 0
    except Exception:
        return 0


_EVENT_HANDLERS = {"null": "null", "console": "console", "dynamic_rendezvous": "null"}


def config_from_args(ns: Namespace) -> Any:
    """The LaunchConfig that the parsed flags describe, as torchrun reads them.

    Raises:
        UsageError: any bad flag value, in one line naming the flag.
    """
    from tpelastic.adapters.launcher.checks import check_store_endpoint
    from tpelastic.adapters.launcher.config import ConfigError, LaunchConfig
    from tpelastic.adapters.rendezvous.parameters import RendezvousParameters, parse_rdzv_conf

    min_nodes, max_nodes = parse_nnodes(ns.nnodes)
    backend, endpoint, run_id = ns.rdzv_backend, ns.rdzv_endpoint, ns.rdzv_id
    master_port = _optional_port("master-port", ns.master_port)
    one_node_alone = backend == "static" and not endpoint and master_port is None
    standalone = bool(ns.standalone) or (one_node_alone and max_nodes == 1)
    if standalone:  # torchrun: a c10d store on a free port, a random run id
        backend, endpoint, run_id = "c10d", "localhost:0", standalone_run_id()
    # --master-addr/--master-port name the static backend's store when no endpoint does
    # (torchrun); otherwise, when given, the workers' fixed bootstrap endpoint.
    bootstrap_addr = ns.master_addr
    bootstrap_port = master_port
    if backend == "static" and not endpoint:
        endpoint = f"{ns.master_addr or '127.0.0.1'}:{master_port or 29500}"
        bootstrap_addr, bootstrap_port = None, None
    try:
        conf: dict[str, Any] = parse_rdzv_conf(ns.rdzv_conf)
        check_store_endpoint(backend, endpoint, str(conf.get("store_type", "tcp")).lower())
        # Every option is checked here, before anything is imported or started.
        _ = RendezvousParameters(
            backend, endpoint, run_id, min_nodes, max_nodes, ns.local_addr, **conf
        ).timeout
    except (ValueError, ConfigError) as error:
        raise UsageError(str(error)) from None
    if backend == "static":
        conf["rank"] = _int("node-rank", ns.node_rank, 0, max_nodes - 1)
    else:
        _int("node-rank", ns.node_rank, 0)
    nproc = parse_nproc(ns.nproc_per_node)
    redirects, tee = _streams(ns, nproc)
    log_dir = ns.log_dir or None  # '' is a temporary folder, as torchrun
    logs_specs = None
    if ns.logs_specs is not None:
        logs_specs = _logs_specs_plugin(
            ns.logs_specs, log_dir, redirects, tee, _ranks_filter(ns.local_ranks_filter)
        )
    metrics_host, metrics_port = parse_bind("metrics-port", ns.metrics_port)
    health_host, health_port = parse_bind("health-port", ns.health_port)
    try:
        config = LaunchConfig(
            min_nodes=min_nodes,
            max_nodes=max_nodes,
            nproc_per_node=nproc,
            run_id=run_id,
            role=ns.role,
            rdzv_endpoint=endpoint,
            rdzv_backend=backend,
            rdzv_configs=conf,
            rdzv_timeout=_optional_float("rdzv-timeout", ns.rdzv_timeout),
            max_restarts=_int("max-restarts", ns.max_restarts, 0),
            monitor_interval=_float("monitor-interval", ns.monitor_interval),
            start_method=ns.start_method,
            logs_specs=logs_specs,
            log_line_prefix_template=os.environ.get("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"),
            log_dir=log_dir,
            redirects=redirects,
            tee=tee,
            local_addr=ns.local_addr,
            master_addr=bootstrap_addr or ("127.0.0.1" if bootstrap_port else None),
            master_port=bootstrap_port,
            exit_barrier_timeout=_float("exit-barrier-timeout", ns.exit_barrier_timeout),
            event_log_handler=_events(ns),
            standalone=standalone,
            metrics_cfg={"tpelastic": ns.metrics} if ns.metrics else {},
            metrics_host=metrics_host,
            metrics_port=metrics_port,
            timers=bool(ns.timers),
            stall_timeout=_optional_float("stall-timeout", ns.stall_timeout),
            stall_first_step_timeout=_optional_float(
                "stall-first-step-timeout", ns.stall_first_step_timeout
            ),
            health_host=health_host,
            health_port=health_port,
            shutdown_timeout=_shutdown_timeout(ns.shutdown_timeout),
            signals_to_handle=_signals(ns.signals_to_handle),
            local_ranks_filter=_ranks_filter(ns.local_ranks_filter),
            duplicate_stdout_filters=_filters(ns.duplicate_stdout_filters),
            duplicate_stderr_filters=_filters(ns.duplicate_stderr_filters),
            virtual_local_rank=bool(ns.virtual_local_rank),
            numa_options=_numa(ns.numa_binding),
            warm_workers=_on_off("warm-workers", ns.warm_workers),
        )
    except ConfigError as error:
        raise UsageError(str(error)) from None
    _make_log_dir(config.log_dir)  # last: nothing is created for a line refused above
    return config


def _make_log_dir(text: str | None) -> None:
    """Create ``--log-dir`` now, as torchrun does (None: a temporary folder, later).

    Raises:
        UsageError: the path is not a folder, cannot be created, or cannot be written.
    """
    if not text:
        return
    if os.path.exists(text) and not os.path.isdir(text):
        raise UsageError(f"--log-dir {text!r} exists and is not a folder")
    try:
        os.makedirs(text, exist_ok=True)
    except OSError as error:
        raise UsageError(f"--log-dir {text!r} cannot be created: {error.strerror}") from None
    if not os.access(text, os.W_OK | os.X_OK):
        raise UsageError(f"--log-dir {text!r} is not writable")


def _events(ns: Namespace) -> str:
    handler = str(ns.event_log_handler)
    if handler not in _EVENT_HANDLERS:
        raise UsageError(
            f"--event-log-handler must be one of {', '.join(_EVENT_HANDLERS)}, got {handler!r}"
        )
    if ns.events_file:
        if ns.events not in (None, "null"):
            raise UsageError("use one of --events and --events-file")
        return f"jsonl:{ns.events_file}"
    return str(ns.events) if ns.events is not None else _EVENT_HANDLERS[handler]


def _optional_float(flag: str, text: object) -> float | None:
    return None if text is None or str(text).strip() == "" else _float(flag, text)


def _optional_port(flag: str, text: object) -> int | None:
    if text is None or str(text).strip() == "":
        return None
    return _int(flag, text, 1, 65535)


def _shutdown_timeout(text: object) -> int | None:
    from tpelastic.adapters.launcher.config import MAX_SECONDS

    if text is None:
        return None
    return _int("shutdown-timeout", text, 0, int(MAX_SECONDS))


def _on_off(flag: str, text: object) -> bool:
    value = str(text).strip().lower()
    if value in ("on", "1", "true", "yes"):
        return True
    if value in ("off", "0", "false", "no"):
        return False
    raise UsageError(f"--{flag} {text!r}: use on or off")


def _signals(text: object) -> str:
    import signal

    names = [name.strip() for name in str(text).split(",")]
    for name in names:
        number = getattr(signal, name, None) if name.startswith("SIG") else None
        if not isinstance(number, signal.Signals) or name.startswith("SIG_"):
            raise UsageError(f"--signals-to-handle: {name!r} is not a signal name (SIGTERM, ...)")
        if number in (signal.SIGKILL, signal.SIGSTOP):
            raise UsageError(f"--signals-to-handle: {name} cannot be handled")
    return str(text)


def _ranks_filter(text: object) -> frozenset[int] | None:
    if not text:
        return None
    try:
        ranks = frozenset(int(rank) for rank in str(text).split(","))
    except ValueError:
        raise UsageError(
            f"--local-ranks-filter must be local ranks separated by commas (0,1,2), got {text!r}"
        ) from None
    if min(ranks) < 0:
        raise UsageError(f"--local-ranks-filter: local ranks are >= 0, got {min(ranks)}")
    return ranks


def _filters(text: object) -> list[str]:
    """torchrun's comma-separated list: ``,,`` is a comma inside an item."""
    if text is None:
        return []
    placeholder = "\0"
    items = str(text).replace(",,", placeholder).split(",")
    return [item.replace(placeholder, ",") for item in items]


def _logs_specs_plugin(name: str, log_dir: str | None, redirects: Any, tee: Any, ranks: Any) -> Any:
    """torchrun's ``--logs-specs NAME``: the class of the ``torchrun.logs_specs`` entry point
    ``NAME``, made as torchrun makes it: ``cls(log_dir=, redirects=, tee=,
    local_ranks_filter=)``. Its ``reify(envs)`` lays out every attempt's files.

    Raises:
        UsageError: no such entry point, or it cannot be loaded or made (one line).
    """
    from importlib.metadata import entry_points

    found = entry_points(group="torchrun.logs_specs", name=name)
    if not found:
        raise UsageError(
            f"--logs-specs {name!r}: no entry point torchrun.logs_specs[{name}] is installed"
        )
    point = next(iter(found))
    try:
        cls = point.load()
        specs = cls(log_dir=log_dir, redirects=redirects, tee=tee, local_ranks_filter=ranks)
    except Exception as error:  # a plugin's own failure: one line, not its traceback
        raise UsageError(
            f"--logs-specs {name!r}: {point.value} failed: {type(error).__name__}: {error}"
        ) from None
    if not callable(getattr(specs, "reify", None)):
        raise UsageError(f"--logs-specs {name!r}: {point.value} has no reify(envs) method")
    return specs


def _numa(mode: object) -> str | None:
    from tpelastic.cli.run_parser import NUMA_MODES

    if mode is None:
        return None
    if mode not in NUMA_MODES:
        raise UsageError(f"--numa-binding must be one of {', '.join(NUMA_MODES)}, got {mode!r}")
    return str(mode)


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
        return "127.0.0.1", _optional_port(flag, value)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise UsageError(f"--{flag}: write an IPv6 address in brackets, e.g. [::1]:9100")
    if not port.strip():
        raise UsageError(f"--{flag} {value!r}: no port after the host (HOST:PORT)")
    return host or "0.0.0.0", _optional_port(flag, port)


def _streams(ns: Namespace, nproc: int) -> tuple[Any, Any]:
    from tpelastic.adapters.workers.api import Std, WorkerStartError

    try:
        return Std.from_str(str(ns.redirects)), Std.from_str(str(ns.tee))
    except WorkerStartError as error:
        raise UsageError(str(error)) from None


def entrypoint_from_args(ns: Namespace) -> tuple[str, list[str]]:
    """The command and arguments each worker runs, as torchrun's: ``$PYTHON_EXEC`` (else this
    interpreter) ``-u [-m] script args``, the program itself with ``--no-python``, or the
    script through ``runpy.run_path`` with ``--run-path`` (which wins over the other two).

    Raises:
        UsageError: the script or program does not exist, or ``--no-python`` with ``--module``.
    """
    script, rest = ns.training_script, list(ns.training_script_args)
    python = os.environ.get("PYTHON_EXEC") or sys.executable
    if ns.run_path:
        if not os.path.isfile(script):
            raise UsageError(f"script {script!r} does not exist")
        return python, ["-u", "-c", _RUN_PATH_CODE, script, *rest]
    if ns.no_python:
        if ns.module:
            raise UsageError("use one of --no-python and --module")
        if find_program(script) is None:
            raise UsageError(f"program {script!r} was not found or is not executable")
        return script, rest
    if ns.module:
        return python, ["-u", "-m", script, *rest]
    if not os.path.isfile(script):
        raise UsageError(f"script {script!r} does not exist")
    return python, ["-u", script, *rest]


__all__ = [
    "PROG",
    "build_parser",
    "config_from_args",
    "entrypoint_from_args",
    "main",
    "max_workers",
    "parse_nnodes",
    "parse_nproc",
]
