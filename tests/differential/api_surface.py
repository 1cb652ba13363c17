"""The shared public API, and how to compare one implementation's signatures with another's.

``SURFACE`` names, for each of our public modules, the oracle modules (relative to ``torch.`` or
``tensorplay.``) and the names they share with ours. :func:`differences` walks every name and
reports each way our signature breaks a call written for the oracle, as short stable keys such as
``LaunchConfig(max_restarts): default``. docs/differences.md lists the keys we keep on purpose.

A call is compatible when it binds the same arguments to the same parameters: every oracle
parameter exists in ours under the same name, at the same position when it is positional, with
the same default. Parameters of ours the oracle lacks are extensions and need a default.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs

DIFFERENCES_PAGE = Path(__file__).resolve().parents[2] / "docs" / "differences.md"

# our module -> [(oracle module relative to the package root, names shared with it)]
SURFACE: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "tpelastic.launcher": [
        ("distributed.launcher.api", ("LaunchConfig", "elastic_launch", "launch_agent")),
    ],
    "tpelastic.agent": [
        (
            "distributed.elastic.agent.server.api",
            (
                "WorkerSpec",
                "Worker",
                "WorkerState",
                "WorkerGroup",
                "RunResult",
                "ElasticAgent",
                "SimpleElasticAgent",
            ),
        ),
        ("distributed.elastic.agent.server.local_elastic_agent", ("LocalElasticAgent",)),
    ],
    "tpelastic.rendezvous": [
        (
            "distributed.elastic.rendezvous.api",
            (
                "RendezvousClosedError",
                "RendezvousConnectionError",
                "RendezvousError",
                "RendezvousGracefulExitError",
                "RendezvousHandler",
                "RendezvousHandlerRegistry",
                "RendezvousInfo",
                "RendezvousParameters",
                "RendezvousStateError",
                "RendezvousStoreInfo",
                "RendezvousTimeoutError",
            ),
        ),
        (
            "distributed.elastic.rendezvous.dynamic_rendezvous",
            ("RendezvousTimeout", "RendezvousSettings", "DynamicRendezvousHandler"),
        ),
        ("distributed.elastic.rendezvous.c10d_rendezvous_backend", ("C10dRendezvousBackend",)),
        ("distributed.elastic.rendezvous.static_tcp_rendezvous", ("StaticTCPRendezvous",)),
        ("distributed.elastic.rendezvous.utils", ("parse_rendezvous_endpoint",)),
    ],
    "tpelastic.multiprocessing": [
        (
            "distributed.elastic.multiprocessing",
            (
                "start_processes",
                "MultiprocessContext",
                "PContext",
                "ProcessFailure",
                "RunProcsResult",
                "SignalException",
                "Std",
                "LogsDest",
                "LogsSpecs",
                "DefaultLogsSpecs",
                "SubprocessContext",
                "to_map",
            ),
        ),
    ],
    "tpelastic.errors": [
        (
            "distributed.elastic.multiprocessing.errors",
            ("ProcessFailure", "ChildFailedError", "record", "ErrorHandler", "get_error_handler"),
        ),
    ],
    "tpelastic.data": [
        ("distributed.elastic.utils.data", ("CyclingIterator", "ElasticDistributedSampler")),
        (
            "distributed.elastic.utils.api",
            ("get_env_variable_or_raise", "get_socket_with_port", "macros"),
        ),
    ],
    "tpelastic.events": [
        ("distributed.elastic.events.api", ("EventSource", "Event", "NodeState", "RdzvEvent")),
        ("distributed.elastic.events", ("record", "construct_and_record_rdzv_event")),
    ],
    "tpelastic.metrics": [
        (
            "distributed.elastic.metrics.api",
            (
                "MetricsConfig",
                "MetricHandler",
                "ConsoleMetricHandler",
                "NullMetricHandler",
                "MetricStream",
                "configure",
                "getStream",
                "prof",
                "profile",
                "put_metric",
                "publish_metric",
                "get_elapsed_time_ms",
                "MetricData",
            ),
        ),
        ("distributed.elastic.metrics", ("initialize_metrics",)),
    ],
    "tpelastic.timer": [
        (
            "distributed.elastic.timer.api",
            ("TimerRequest", "TimerClient", "RequestQueue", "TimerServer", "configure", "expires"),
        ),
        (
            "distributed.elastic.timer",
            ("LocalTimerClient", "LocalTimerServer", "FileTimerClient", "FileTimerServer"),
        ),
    ],
}

_EMPTY = inspect.Parameter.empty
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def import_oracle(root: str, relative: str) -> ModuleType | None:
    """``root.relative`` (``root`` is ``torch`` or ``tensorplay``), or None if absent."""
    try:
        return importlib.import_module(f"{root}.{relative}")
    except ImportError:
        return None


def _norm_default(value: Any) -> object:
    """A default reduced to what a caller sees: factories equal, enums by class and member."""
    if value is _EMPTY:
        return _EMPTY
    if value is attrs.NOTHING or type(value).__name__ == "_HAS_DEFAULT_FACTORY_CLASS":
        return "<factory>"
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if inspect.isclass(value) or inspect.isroutine(value):
        return getattr(value, "__name__", repr(value))
    return value


def _signature(obj: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        return None


def signature_differences(ours: Any, theirs: Any, label: str) -> Iterator[str]:
    """Keys for each way a call valid for ``theirs`` fails or binds differently on ``ours``."""
    mine, other = _signature(ours), _signature(theirs)
    if other is None:
        return
    if mine is None:
        yield f"{label}: signature"
        return
    a = [p for p in mine.parameters.values() if p.name not in ("self", "cls")]
    b = [p for p in other.parameters.values() if p.name not in ("self", "cls")]
    by_name = {p.name: p for p in a}
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in a)
    their_var_pos = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in b)
    my_pos = [p for p in a if p.kind in _POSITIONAL]
    their_pos = [p for p in b if p.kind in _POSITIONAL]
    for p in b:
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            if not var_kw:
                yield f"{label}(**{p.name}): missing"
            continue
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            if not any(q.kind is inspect.Parameter.VAR_POSITIONAL for q in a):
                if not their_pos:  # a shim that takes anything: its named ones are checked
                    continue
                yield f"{label}(*{p.name}): missing"
            continue
        q = by_name.get(p.name)
        if q is None:
            if not var_kw:
                yield f"{label}({p.name}): missing"
            continue
        if p.kind in _POSITIONAL and not their_var_pos:
            index = their_pos.index(p)
            if q.kind not in _POSITIONAL:
                yield f"{label}({p.name}): keyword-only"
            elif my_pos.index(q) != index:
                yield f"{label}({p.name}): position"
        d_ours, d_theirs = _norm_default(q.default), _norm_default(p.default)
        if d_theirs is not _EMPTY:
            if d_ours is _EMPTY:
                yield f"{label}({p.name}): required"
            elif not _same(d_ours, d_theirs):
                yield f"{label}({p.name}): default"
    names = {p.name for p in b}
    for index, q in enumerate(a):
        if q.name in names or q.kind in (
            inspect.Parameter.VAR_KEYWORD,
            inspect.Parameter.VAR_POSITIONAL,
        ):
            continue
        if q.default is _EMPTY:
            yield f"{label}({q.name}): extra-required"
        elif q.kind in _POSITIONAL and index < len(their_pos) and not their_var_pos:
            yield f"{label}({q.name}): extra-positional"


def _same(x: object, y: object) -> bool:
    if isinstance(x, bool) or isinstance(y, bool):
        return x is y
    try:
        return bool(x == y)
    except Exception:  # an odd default that cannot compare: its text decides
        return repr(x) == repr(y)


def _oracle_members(cls: type, root: str) -> dict[str, Any]:
    """Public attributes ``cls`` defines in the oracle package (not those of builtins)."""
    members: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if not (klass.__module__ or "").startswith(root + "."):
            continue
        for name, value in vars(klass).items():
            if not name.startswith("_") or name == "__init__":
                members[name] = value
    return members


def _is_enum(cls: object) -> bool:
    return inspect.isclass(cls) and issubclass(cls, enum.Enum)


def object_differences(name: str, ours: Any, theirs: Any, root: str) -> Iterator[str]:
    """Differences of one shared name: its call signature, then its methods and attributes."""
    if _is_enum(theirs):
        mine = {m.name for m in ours} if _is_enum(ours) else set()
        for member in theirs:
            if member.name not in mine:
                yield f"{name}.{member.name}: missing"
        return
    if inspect.isclass(theirs):
        if not inspect.isclass(ours):
            yield f"{name}: not a class"
            return
        if not (issubclass(theirs, BaseException) and issubclass(ours, BaseException)):
            yield from signature_differences(ours, theirs, name)
        fields = _field_names(theirs)
        for member, value in sorted(_oracle_members(theirs, root).items()):
            if member == "__init__":
                continue
            label = f"{name}.{member}"
            if not hasattr(ours, member) and member not in _field_names(ours):
                yield f"{label}: missing"
                continue
            if member in fields:
                continue
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if inspect.isfunction(value):
                mine = _unwrap(inspect.getattr_static(ours, member))
                yield from signature_differences(mine, value, label)
        for field in sorted(fields - _field_names(ours)):
            if not hasattr(ours, field):
                yield f"{name}.{field}: missing"
        return
    if callable(theirs):
        yield from signature_differences(ours, theirs, name)
        return
    for member in sorted(m for m in vars(theirs) if not m.startswith("_")):
        if not hasattr(ours, member):
            yield f"{name}.{member}: missing"
        elif callable(getattr(theirs, member)):
            yield from signature_differences(
                getattr(ours, member), getattr(theirs, member), f"{name}.{member}"
            )


def _field_names(cls: Any) -> set[str]:
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    if attrs.has(cls):
        return {a.name for a in attrs.fields(cls)}
    return set()


def _unwrap(value: Any) -> Any:
    return value.__func__ if isinstance(value, (staticmethod, classmethod)) else value


def differences(root: str) -> list[str]:
    """Every difference key of our public modules against oracle ``root``, sorted."""
    found: set[str] = set()
    for ours_path, groups in SURFACE.items():
        ours_module = importlib.import_module(ours_path)
        for relative, names in groups:
            oracle = import_oracle(root, relative)
            if oracle is None:
                continue
            for name in names:
                if not hasattr(oracle, name):
                    continue
                theirs = getattr(oracle, name)
                if not hasattr(ours_module, name):
                    found.add(f"{name}: missing")
                    continue
                found.update(object_differences(name, getattr(ours_module, name), theirs, root))
    return sorted(found)


_ROW = re.compile(r"^\|\s*`?(torch|tensorplay|both)`?\s*\|\s*`([^`]+)`\s*\|")


def documented(root: str) -> set[str]:
    """The difference keys docs/differences.md lists for ``root`` (rows for ``both`` count).

    A key ``Name*`` stands for every difference key of ``Name`` (its parameters, members)."""
    keys: set[str] = set()
    for line in DIFFERENCES_PAGE.read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line.strip())
        if match and match.group(1) in (root, "both"):
            keys.add(match.group(2))
    return keys


def undocumented_and_stale(found: set[str], listed: set[str]) -> tuple[list[str], list[str]]:
    """Found keys no row covers, and rows that cover nothing found (exact or ``*`` rows)."""
    exact = {key for key in listed if not key.endswith("*")}
    prefixes = {key[:-1] for key in listed if key.endswith("*")}

    def of(prefix: str, key: str) -> bool:
        return key.startswith(prefix) and key[len(prefix) : len(prefix) + 1] in ("(", ".", ":")

    covered = {key for key in found if key in exact or any(of(p, key) for p in prefixes)}
    stale = sorted(exact - found) + sorted(
        f"{p}*" for p in prefixes if not any(of(p, key) for key in found)
    )
    return sorted(found - covered), stale
