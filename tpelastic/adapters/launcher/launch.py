"""Run one node's agent from a LaunchConfig: ``run_agent``, ``launch_agent``, ``elastic_launch``."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from attrs import evolve

from tpelastic.adapters.agent.local import LocalElasticAgent
from tpelastic.adapters.agent.spec import RunResult, WorkerSpec
from tpelastic.adapters.launcher.checks import (
    check_store_endpoint,
    require_free_port,
    require_reachable,
    require_store_answers,
)
from tpelastic.adapters.launcher.config import MAX_SECONDS, ConfigError, LaunchConfig
from tpelastic.adapters.rendezvous.parameters import DEFAULT_PORT, RendezvousParameters
from tpelastic.adapters.workers.api import ChildFailedError
from tpelastic.adapters.workers.logs import LogsSpecs

if TYPE_CHECKING:
    from tpelastic.adapters.rendezvous.registry import HandlerRegistry

log = logging.getLogger("tpelastic.agent")
_DYNAMIC = ("tcp", "c10d", "p10d")


class LaunchError(RuntimeError):
    """The job failed without a worker failure to show (rendezvous failed, signal, closed).

    Attributes:
        exit_code: the agent's exit status (see docs/launcher.md).
    """

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def rendezvous_parameters(
    config: LaunchConfig, registry: HandlerRegistry | None = None
) -> RendezvousParameters:
    """The rendezvous request for ``config`` (``registry``: see :func:`create_rendezvous_handler`).

    Raises:
        ConfigError: a bad rendezvous option (named in the message).
    """
    backend = config.rdzv_backend
    options = config.rendezvous_config()
    if backend in _DYNAMIC and not _registered(backend, registry) and config.max_nodes == 1:
        # A one-node world needs no negotiation: the static backend, hosted here, serves it
        # until a dynamic backend is installed.
        backend = "static"
        options.setdefault("rank", 0)
    if backend == "static" and "timeout" in options:
        # torch's static backend takes its join timeout from ``timeout``.
        options.setdefault("join_timeout", options.pop("timeout"))
    endpoint = config.rdzv_endpoint
    if backend in _DYNAMIC and not endpoint.strip():
        endpoint = f"localhost:{DEFAULT_PORT}"  # torch's c10d backend: hosted here if free
    try:
        return RendezvousParameters(
            backend,
            endpoint,
            config.run_id,
            config.min_nodes,
            config.max_nodes,
            config.local_addr,
            **options,
        )
    except ValueError as error:
        raise ConfigError(str(error)) from None


def _registry(given: HandlerRegistry | None) -> HandlerRegistry:
    if given is not None:
        return given
    from tpelastic.rendezvous import handler_registry

    return handler_registry


def _registered(backend: str, registry: HandlerRegistry | None) -> bool:
    try:
        _registry(registry).factory(backend)
    except Exception:
        return False
    return True


def create_rendezvous_handler(config: LaunchConfig, registry: HandlerRegistry | None = None) -> Any:
    """Build the rendezvous handler for ``config`` from ``registry``'s backends (default: the
    process's ``tpelastic.rendezvous.handler_registry``, torch's ``rendezvous_handler_registry``).

    Raises:
        ConfigError: unknown backend, bad options for it, or its extra not installed (one
            line).
        RendezvousError: the backend could not reach or host its store.
    """
    if config.standalone and config.max_nodes == 1:
        return _in_memory_handler(config)
    params = rendezvous_parameters(config, registry)
    _check_ports(config, params)
    _check_store(params)
    try:
        return _registry(registry).create_handler(params)
    except (ValueError, ImportError) as error:  # ImportError: a backend's extra is missing
        raise ConfigError(str(error)) from None


def _in_memory_handler(config: LaunchConfig) -> Any:
    # One node alone: nobody else reads the rendezvous state, so an in-process store serves it
    # with the same dynamic handler (and no store server or tensorplay import in the agent).
    from tpelastic.adapters.rendezvous.dynamic import DynamicRendezvousHandler
    from tpelastic.adapters.stores.memory import MemoryStore

    options = config.rendezvous_config()
    try:
        params = RendezvousParameters(
            "tcp", "127.0.0.1:0", config.run_id, 1, 1, config.local_addr or "127.0.0.1", **options
        )
        return DynamicRendezvousHandler.from_parameters(params, MemoryStore())
    except ValueError as error:
        raise ConfigError(str(error)) from None


def _check_ports(config: LaunchConfig, params: RendezvousParameters) -> None:
    if config.master_addr and config.master_port:
        require_free_port("--master-port", _bind_host(config.master_addr), config.master_port)
    if (
        params.backend == "static"
        and params.get_as_int("rank") == 0
        and params.is_host is not False
    ):
        host, port = params.host_port()
        if host and port:
            require_free_port("rendezvous endpoint port", _bind_host(host), port)


def _check_store(params: RendezvousParameters) -> None:
    """The endpoint is well formed, and a store this agent does not host can be reached
    (tried for up to the join timeout), before anything starts.

    Raises:
        ConfigError: one line naming the endpoint and what is wrong.
    """
    host, port = check_store_endpoint(params.backend, params.endpoint, params.store_type)
    if not host or port is None:
        return
    if params.backend == "static":
        hosts = params.get_as_int("rank") == 0 and params.is_host is not False
    elif params.backend in _DYNAMIC:
        from tpelastic.adapters.rendezvous.hosting import endpoint_is_local

        hosts = params.is_host is True or (
            params.is_host is None and endpoint_is_local(host) and _bindable(host, port)
        )
    else:
        hosts = False
    if hosts:
        return
    timeout = params.timeout.join.total_seconds()
    if params.backend == "static" or (
        params.backend in _DYNAMIC and params.store_type in ("tcp", "tensorplay")
    ):
        from tpelastic.adapters.stores.signed import load_secret

        try:
            secret = load_secret(params.get("secret_file"))
        except ValueError as error:
            raise ConfigError(str(error)) from None
        # Only our server asks for the secret; tensorplay's (static, store_type=tensorplay)
        # has no handshake.
        ours = params.backend != "static" and params.store_type == "tcp"
        require_store_answers("rendezvous store", host, port, timeout, secret if ours else None)
    else:
        require_reachable("rendezvous store", host, port, timeout)


def _bindable(host: str, port: int) -> bool:
    try:
        require_free_port("rendezvous endpoint port", _bind_host(host), port)
    except ConfigError:
        return False
    return True


def _bind_host(host: str) -> str:
    return "127.0.0.1" if host == "localhost" else host


def worker_spec(
    config: LaunchConfig,
    entrypoint: str | Callable[..., Any],
    args: Sequence[Any],
    registry: HandlerRegistry | None = None,
    *,
    metrics: Any = None,
) -> WorkerSpec:
    """The agent's WorkerSpec for ``config`` (builds the rendezvous handler from ``registry``:
    see :func:`create_rendezvous_handler`); ``metrics``: the run's ``MetricsRouter``, if any."""
    # A plugin's LogsSpecs keeps its settings to itself: the agent hands it over whole.
    logs: Any = config
    if config.logs_specs is not None and type(config.logs_specs) is LogsSpecs:
        logs = config.logs_specs
    return WorkerSpec(
        role=config.role,
        local_world_size=config.nproc_per_node,
        rdzv_handler=create_rendezvous_handler(config, registry),
        entrypoint=entrypoint,
        args=tuple(args),
        max_restarts=config.max_restarts,
        monitor_interval=config.monitor_interval,
        min_nodes=config.min_nodes,
        max_nodes=config.max_nodes,
        master_addr=config.master_addr,
        master_port=config.master_port,
        local_addr=config.local_addr,
        start_method=config.start_method,
        redirects=logs.redirects,
        tee=logs.tee,
        log_dir=logs.log_dir,
        exit_barrier_timeout=config.exit_barrier_timeout,
        event_log_handler=config.event_log_handler,
        timers=config.timers,
        stall_timeout=config.stall_timeout,
        stall_first_step_timeout=config.stall_first_step_timeout,
        health_port=config.health_port,
        health_host=config.health_host,
        local_ranks_filter=config.local_ranks_filter,
        numa_options=config.numa_options,
        duplicate_stdout_filters=config.duplicate_stdout_filters,
        duplicate_stderr_filters=config.duplicate_stderr_filters,
        virtual_local_rank=config.virtual_local_rank,
        signals_to_handle=config.signals_to_handle,
        close_timeout=shutdown_grace(config),
        warm_workers=config.warm_workers,
        metrics=metrics,
    )


DEFAULT_SHUTDOWN_TIMEOUT = 10


def shutdown_grace(config: LaunchConfig) -> float:
    """Seconds a stopped worker gets before SIGKILL: ``shutdown_timeout``, else
    ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` (as torch), else 10, so that the agent and every worker
    are gone well within the 30 s a scheduler waits between SIGTERM and SIGKILL.

    Raises:
        ConfigError: ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` is not a whole number of seconds >= 0.
    """
    if config.shutdown_timeout is not None:
        return float(config.shutdown_timeout)
    text = os.environ.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT")
    if text is None:
        return float(DEFAULT_SHUTDOWN_TIMEOUT)
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_SECONDS:
        raise ConfigError(
            f"TORCH_ELASTIC_SHUTDOWN_TIMEOUT must be whole seconds in 0..{MAX_SECONDS:g}, "
            f"got {text!r}"
        )
    return float(value)


def run_agent(
    config: LaunchConfig,
    entrypoint: str | Callable[..., Any],
    args: Sequence[Any],
    *,
    on_outcome: Callable[[int], None] | None = None,
    registry: HandlerRegistry | None = None,
) -> RunResult:
    """Run this node's agent to the end and say how it ended (never raises for job failures).

    ``on_outcome`` is called with the exit code once the outcome is in and only the agent's
    bounded teardown is left (``tpelastic run`` arms its exit guard there). ``registry`` holds
    the rendezvous backends (default: the process's ``handler_registry``).

    Raises:
        ConfigError: bad configuration (before anything starts).
        WorkerStartError: the entrypoint cannot be started.
    """
    if not config.run_id:
        # As torch: a config without a run id gets a random one (fine for one node; nodes of a
        # multi-node job must share an id, so they pass one).
        import uuid

        config = evolve(config, run_id=uuid.uuid4().hex[:12])
        log.warning("config has no run_id, generated a random run_id: %s", config.run_id)
    if config.metrics_cfg:
        from tpelastic.adapters.sinks.metrics import MetricsConfig, initialize_metrics

        initialize_metrics(MetricsConfig(groups=dict(config.metrics_cfg)))
    metrics_at = (config.metrics_host, config.metrics_port)
    # One endpoint serves /metrics and /health unless --health-port names another one.
    shared = config.metrics_port is not None and (
        config.health_port is None or (config.health_host, config.health_port) == metrics_at
    )
    if shared:
        config = evolve(config, health_host=config.metrics_host, health_port=config.metrics_port)
    if config.health_port is not None:
        require_free_port("--health-port", config.health_host, config.health_port)
    prometheus = _prometheus(config, shared) if config.metrics_port is not None else None
    try:
        agent = LocalElasticAgent(
            worker_spec(config, entrypoint, args, registry, metrics=_run_router(prometheus)),
            logs_specs=config.logs_specs,
            log_line_prefix_template=config.log_line_prefix_template,
        )
        agent.on_outcome = on_outcome
        return agent.run(config.role)
    finally:
        if prometheus is not None:
            prometheus.close()


def _prometheus(config: LaunchConfig, shared: bool) -> Any:
    """The run's Prometheus handler for ``--metrics-port`` (with a shared endpoint the agent's
    health server serves it)."""
    from tpelastic.adapters.sinks.prometheus import PrometheusMetricHandler

    host, port = config.metrics_host, config.metrics_port
    assert port is not None
    if not shared:
        require_free_port("--metrics-port", host, port)
    try:
        handler = PrometheusMetricHandler(
            port=port, host=host, serve=not shared, run_id=config.run_id, role=config.role
        )
    except ImportError as error:
        raise ConfigError(f"--metrics-port: {error}") from None
    except OSError as error:
        raise ConfigError(f"--metrics-port: cannot listen on {host}:{port}: {error}") from None
    if not shared:
        log.info("metrics for Prometheus at %s", handler.url)
    return handler


def _run_router(prometheus: Any) -> Any:
    """This run's metrics router: the agent's metrics (group ``tpelastic``) to the Prometheus
    handler, every other group to the process's routing; None without a handler."""
    if prometheus is None:
        return None
    from tpelastic.adapters.sinks.metrics import run_router

    return run_router(prometheus)


def launch_agent(
    config: LaunchConfig,
    entrypoint: str | Callable[..., Any] | None,
    args: Sequence[Any],
    health_check_server: object | None = None,
) -> dict[int, Any]:
    """Run this node's agent; return its workers' return values by global rank.

    ``entrypoint`` None runs ``sys.executable`` with ``args`` (a script and its arguments).
    ``health_check_server`` is accepted for torch's signature; ours is ``config.health_port``.

    Raises:
        ChildFailedError: workers failed and the restart budget is spent (the summary names
            the root cause).
        LaunchError: the job failed otherwise (rendezvous failed, interrupted, closed).
        ConfigError: bad configuration.
    """
    result = run_agent(config, entrypoint if entrypoint is not None else sys.executable, args)
    if not result.is_failed():
        return result.return_values
    if result.failures:
        name = getattr(entrypoint, "__qualname__", str(entrypoint))
        raise ChildFailedError(name, result.failures)
    raise LaunchError(result.reason or "the job failed", result.exit_code)


class elastic_launch:
    """Launch ``entrypoint`` elastically: ``elastic_launch(config, fn)(*args)``.

    Returns per global rank the callable's return value (None for commands).
    """

    def __init__(
        self,
        config: LaunchConfig,
        entrypoint: str | Callable[..., Any] | None,
        health_check_server: object | None = None,
    ) -> None:
        self._config = config
        self._entrypoint = entrypoint
        self._health_check_server = health_check_server

    def __call__(self, *args: Any) -> dict[int, Any]:
        return launch_agent(self._config, self._entrypoint, args, self._health_check_server)


__all__ = [
    "LaunchError",
    "create_rendezvous_handler",
    "elastic_launch",
    "launch_agent",
    "rendezvous_parameters",
    "run_agent",
    "worker_spec",
]
