"""Metrics: values, handlers, routers of groups to handlers, ``prof``.

The agent publishes to the :class:`MetricsRouter` it is given (``WorkerSpec.metrics``; the
launcher builds one per run with :func:`run_router`). torch's module-level functions
(``configure``, ``put_metric``, ``prof``, ``getStream``) are called from deep inside training
code, where no router can be passed down: as in torch, they route through the process's router
(:func:`process_router`), which only they, and a run router's groups without a handler of
their own, use.

Metric names the agent publishes are listed in :class:`AgentMetric` and docs/observability.md.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
from collections.abc import Callable, Mapping
from typing import IO, Any, Protocol, TypeVar, overload

from attrs import field, frozen

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.sinks.lines import write_line

DEFAULT_GROUP = "tpelastic"
LOGGER_NAME = "tpelastic.metrics"

F = TypeVar("F", bound=Callable[..., Any])


@frozen
class MetricData:
    """One observation: ``value`` of ``name`` in ``group_name`` at wall-clock ``timestamp``."""

    timestamp: float
    group_name: str
    name: str
    value: float

    @property
    def group(self) -> str:
        """``group_name``."""
        return self.group_name


class AgentMetric:
    """Names of the metrics the agent publishes (group ``tpelastic``); see docs/observability.md.

    Names ending in ``.`` take a suffix: ``workers.HEALTHY``, ``failures.timeout``,
    ``rank.step.3`` (global rank 3).
    """

    RDZV_DURATION_S = "rendezvous.duration_s"
    RDZV_ROUND = "rendezvous.round"
    RESTARTS_USED = "restarts.used"
    RESTARTS_LEFT = "restarts.left"
    WORLD_SIZE = "world.size"
    NODES = "world.nodes"
    STRAGGLERS = "stragglers"
    WORKERS_PREFIX = "workers."
    FAILURES_PREFIX = "failures."
    RANK_STEP_PREFIX = "rank.step."
    RANK_STEP_TIME_PREFIX = "rank.step_time_s."


class MetricHandler(Protocol):
    """Where metrics go. ``emit`` must neither block for long nor raise."""

    def emit(self, metric_data: MetricData) -> None: ...


class NullMetricHandler:
    """Drops every metric."""

    def emit(self, metric_data: MetricData) -> None:
        return None


def format_metric(data: MetricData) -> str:
    """``[group][timestamp]: name=value``, the console and logging line format."""
    return f"[{data.group}][{data.timestamp:.3f}]: {data.name}={data.value:g}"


class ConsoleMetricHandler:
    """Prints each metric as one line to a stream (stdout unless given)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream

    def emit(self, metric_data: MetricData) -> None:
        stream = self._stream if self._stream is not None else sys.stdout
        write_line(stream, format_metric(metric_data))


class LoggingMetricHandler:
    """Logs each metric as one line at INFO on the ``tpelastic.metrics`` logger."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._logger = logger or logging.getLogger(LOGGER_NAME)

    def emit(self, metric_data: MetricData) -> None:
        self._logger.info("%s", format_metric(metric_data))


def _handler_names(value: Mapping[str, str]) -> dict[str, str]:
    out = dict(value)
    for group, name in out.items():
        if name not in _SIMPLE_HANDLERS:
            raise ValueError(
                f"metrics group {group!r}: unknown handler {name!r}; "
                f"known: {', '.join(_SIMPLE_HANDLERS)} (build others, e.g. Prometheus, in code)"
            )
    return out


_SIMPLE_HANDLERS: Mapping[str, Callable[[], MetricHandler]] = {
    "null": NullMetricHandler,
    "console": ConsoleMetricHandler,
    "logging": LoggingMetricHandler,
}


@frozen(kw_only=True)
class MetricsConfig:
    """Which handler each metric group goes to, by name (``null``, ``console``, ``logging``).

    Attributes:
        groups: group name -> handler name.
        default: handler name for groups not listed.
    """

    groups: dict[str, str] = field(factory=dict, converter=_handler_names, hash=False)
    default: str = field(default="null")

    @default.validator
    def _check_default(self, _attribute: object, value: str) -> None:
        _handler_names({"<default>": value})


class MetricsRouter:
    """Maps metric groups to handlers; thread-safe. A missing group goes to the default."""

    def __init__(self, default: MetricHandler | None = None) -> None:
        self._lock = threading.Lock()
        self._groups: dict[str, MetricHandler] = {}
        self._default: MetricHandler = default or NullMetricHandler()

    def configure(self, handler: MetricHandler, group: str | None = None) -> None:
        """Route ``group`` (every group without its own handler, if None) to ``handler``."""
        with self._lock:
            if group is None:
                self._default = handler
            else:
                self._groups[group] = handler

    def routed(self, group: str) -> MetricHandler | None:
        """The handler ``group`` has of its own, or None when it goes to the default."""
        with self._lock:
            return self._groups.get(group)

    def unroute(self, group: str) -> None:
        """Send ``group`` to the default handler again (no-op when it has no handler of its own)."""
        with self._lock:
            self._groups.pop(group, None)

    def handler_for(self, group: str) -> MetricHandler:
        with self._lock:
            return self._groups.get(group, self._default)

    def put(self, name: str, value: float, group: str = DEFAULT_GROUP) -> None:
        """Send one observation, stamped now, to the group's handler."""
        data = MetricData(SYSTEM_CLOCK.wall(), group, name, float(value))
        self.handler_for(group).emit(data)


_PROCESS = MetricsRouter()


def process_router() -> MetricsRouter:
    """The router of torch's module-level functions (``configure``, ``put_metric``, ...)."""
    return _PROCESS


class ProcessRouting:
    """A handler that sends each metric where the process's router routes its group."""

    def emit(self, metric_data: MetricData) -> None:
        _PROCESS.handler_for(metric_data.group_name).emit(metric_data)


def run_router(handler: MetricHandler | None = None, group: str = DEFAULT_GROUP) -> MetricsRouter:
    """A router for one run: ``group`` to ``handler`` (when given), every other group where the
    process's router sends it (torch's ``configure`` and ``initialize_metrics`` still apply)."""
    router = MetricsRouter(default=ProcessRouting())
    if handler is not None:
        router.configure(handler, group)
    return router


def configure(handler: MetricHandler, group: str | None = None) -> None:
    """Route metrics of ``group`` (all unrouted groups if None) to ``handler``, process-wide."""
    _PROCESS.configure(handler, group)


def initialize_metrics(
    cfg: MetricsConfig | None = None, router: MetricsRouter | None = None
) -> None:
    """Apply ``cfg`` (None: every group to ``null``) to ``router`` (the process-wide one)."""
    config = cfg if cfg is not None else MetricsConfig()
    target = router or _PROCESS
    target.configure(_SIMPLE_HANDLERS[config.default]())
    for group, name in config.groups.items():
        target.configure(_SIMPLE_HANDLERS[name](), group)


def put_metric(metric_name: str, metric_value: float, metric_group: str = DEFAULT_GROUP) -> None:
    """Publish ``metric_value`` for ``metric_name`` in ``metric_group`` (process-wide routing).

    Raises:
        TypeError / ValueError: if ``metric_value`` is not a number.
    """
    _PROCESS.put(metric_name, metric_value, metric_group)


def publish_metric(metric_group: str, metric_name: str, metric_value: float) -> None:
    """torch's older spelling of :func:`put_metric`, group first."""
    _PROCESS.put(metric_name, metric_value, metric_group)


class MetricStream:
    """A group bound to its handler: ``add_value(name, value)`` publishes there."""

    def __init__(self, group_name: str, handler: MetricHandler) -> None:
        self.group_name = group_name
        self.handler = handler

    def add_value(self, metric_name: str, metric_value: float) -> None:
        self.handler.emit(
            MetricData(SYSTEM_CLOCK.wall(), self.group_name, metric_name, metric_value)
        )


def getStream(group: str) -> MetricStream:
    """The stream of ``group`` with the handler the process-wide routing gives it now."""
    return MetricStream(group, _PROCESS.handler_for(group))


def get_elapsed_time_ms(start_time_in_seconds: float) -> float:
    """Milliseconds since ``start_time_in_seconds`` (a ``time.time()`` value)."""
    return (SYSTEM_CLOCK.wall() - start_time_in_seconds) * 1000.0


@overload
def prof(fn: F, group: str = DEFAULT_GROUP) -> F: ...
@overload
def prof(fn: None = None, group: str = DEFAULT_GROUP) -> Callable[[F], F]: ...
def prof(fn: F | None = None, group: str = DEFAULT_GROUP) -> F | Callable[[F], F]:
    """Decorator: time each call of a function and count its successes and failures.

    Publishes ``<qualname>.duration.ms`` (every call) and ``<qualname>.success`` or
    ``<qualname>.failure`` (value 1) to ``group``. Use as ``@prof`` or ``@prof(group="x")``.
    The function's exception, if any, propagates unchanged after the failure is counted.
    """

    def wrap(func: F) -> F:
        key = getattr(func, "__qualname__", getattr(func, "__name__", "fn"))

        @functools.wraps(func)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = SYSTEM_CLOCK.now()
            outcome = "failure"
            try:
                result = func(*args, **kwargs)
                outcome = "success"
                return result
            finally:
                put_metric(f"{key}.{outcome}", 1, group)
                put_metric(f"{key}.duration.ms", (SYSTEM_CLOCK.now() - start) * 1000.0, group)

        return timed  # type: ignore[return-value]

    return wrap(fn) if fn is not None else wrap


def profile(group: str | None = None) -> Callable[[F], F]:
    """torch's ``@profile(group)``: :func:`prof` as a decorator factory."""
    return prof(group=group or DEFAULT_GROUP)
