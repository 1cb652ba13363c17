"""Event values, their JSON-lines form, the event handlers and ``record``.

An event record is a log entry, not shared state, so it carries a wall-clock timestamp: it is
never compared with another node's clock to decide anything. The JSON-lines schema (version 1) is
documented in docs/observability.md; :func:`to_json_dict` and :func:`from_json_dict` are its only
writer and reader.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import IO, Protocol, TypeAlias

from attrs import field, frozen

from tpelastic.adapters.sinks.lines import write_line
from tpelastic.core.values import Emit

SCHEMA_VERSION = 1
LOGGER_NAME = "tpelastic.events"
_log = logging.getLogger(__name__)

Json: TypeAlias = str | int | float | bool | None | list["Json"] | dict[str, "Json"]


class EventSource(str, enum.Enum):
    """Who an event is about."""

    AGENT = "AGENT"
    WORKER = "WORKER"


class NodeState(str, enum.Enum):
    """A node's lifecycle state as carried by rendezvous events."""

    INIT = "INIT"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


def to_json_value(value: object) -> Json:
    """``value`` as plain JSON: enums by name, sequences as lists, anything else by ``str``."""
    # Enums first: a str- or int-valued enum is written by name, not as its value.
    if isinstance(value, enum.Enum):
        return value.name
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [to_json_value(v) for v in items]
    return str(value)


def _metadata(value: Mapping[str, object] | None) -> dict[str, Json]:
    return {str(k): to_json_value(v) for k, v in (value or {}).items()}


@frozen
class Event:
    """One agent or worker lifecycle event (torch's fields, in torch's order).

    ``timestamp`` is wall-clock seconds (a log entry's time, never compared across nodes).
    ``metadata`` holds JSON values only (the converter makes them so), so every event can be
    written and read back unchanged: :meth:`serialize` gives torch's JSON form.
    """

    name: str
    source: EventSource
    timestamp: float = 0.0
    metadata: dict[str, Json] = field(factory=dict, converter=_metadata, hash=False)

    def __str__(self) -> str:
        return self.serialize()

    def serialize(self) -> str:
        """The event as torch writes it: ``{"name", "source", "timestamp", "metadata"}``."""
        return json.dumps(
            {
                "name": self.name,
                "source": self.source.name,
                "timestamp": self.timestamp,
                "metadata": dict(self.metadata),
            }
        )

    @staticmethod
    def deserialize(data: str | Event) -> Event:
        """An event from :meth:`serialize`'s text (torch's too); an ``Event`` is returned as is.

        Raises:
            ValueError: text that is not such an object (JSON errors are ``ValueError`` too).
        """
        if isinstance(data, Event):
            return data
        obj = json.loads(data)
        try:
            return Event(
                obj["name"], EventSource[obj["source"]], obj["timestamp"], obj.get("metadata", {})
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a serialized event: {exc}") from None


@frozen
class RdzvEvent:
    """A rendezvous progress event (torch's fields, in torch's order, then ours).

    ``round`` (the rendezvous round, -1 when none), ``node`` (the agent's node id, what the
    join trace replays) and ``timestamp`` (wall-clock seconds) are ours and keyword-only.
    :meth:`serialize` gives torch's JSON form (torch's fields only).
    """

    name: str
    run_id: str
    message: str
    hostname: str
    pid: int
    node_state: NodeState
    master_endpoint: str = ""
    rank: int | None = None
    local_id: int | None = None
    error_trace: str = ""
    round: int = field(default=-1, kw_only=True)
    node: str = field(default="", kw_only=True)
    timestamp: float = field(default=0.0, kw_only=True)

    def __str__(self) -> str:
        return self.serialize()

    def serialize(self) -> str:
        """The event as torch writes it (``dataclasses.asdict``, the state by name)."""
        return json.dumps(
            {
                "name": self.name,
                "run_id": self.run_id,
                "message": self.message,
                "hostname": self.hostname,
                "pid": self.pid,
                "node_state": self.node_state.name,
                "master_endpoint": self.master_endpoint,
                "rank": self.rank,
                "local_id": self.local_id,
                "error_trace": self.error_trace,
            }
        )

    @staticmethod
    def deserialize(data: str | RdzvEvent) -> RdzvEvent:
        """An event from :meth:`serialize`'s text (torch's too); an ``RdzvEvent`` as is.

        Raises:
            ValueError: text that is not such an object (JSON errors are ``ValueError`` too).
        """
        if isinstance(data, RdzvEvent):
            return data
        obj = json.loads(data)
        try:
            return RdzvEvent(
                str(obj["name"]),
                str(obj["run_id"]),
                str(obj["message"]),
                str(obj["hostname"]),
                int(obj["pid"]),
                NodeState[obj["node_state"]],
                str(obj.get("master_endpoint", "")),
                obj.get("rank"),
                obj.get("local_id"),
                str(obj.get("error_trace", "")),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a serialized rendezvous event: {exc}") from None


AnyEvent = Event | RdzvEvent


def event_from_emit(
    emit: Emit, source: EventSource = EventSource.AGENT, now_wall: float = 0.0
) -> Event:
    """The :class:`Event` for one ``Emit`` effect of the core, stamped with ``now_wall``.

    The agent routes every transition's ``Emit`` through this to :func:`record`, so the event
    stream replays the core's transitions in order.
    """
    return Event(name=emit.name, source=source, timestamp=now_wall, metadata=emit.as_dict())


def to_json_dict(event: AnyEvent) -> dict[str, Json]:
    """The schema-v1 object for ``event`` (see docs/observability.md)."""
    if isinstance(event, Event):
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": "event",
            "name": event.name,
            "source": event.source.value,
            "timestamp": event.timestamp,
            "metadata": dict(event.metadata),
        }
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "rdzv",
        "name": event.name,
        "run_id": event.run_id,
        "round": event.round,
        "node": event.node,
        "state": event.node_state.value,
        "rank": event.rank,
        "message": event.message,
        "timestamp": event.timestamp,
        "hostname": event.hostname,
        "pid": event.pid,
        "master_endpoint": event.master_endpoint,
        "local_id": event.local_id,
        "error_trace": event.error_trace,
    }


def from_json_dict(obj: Mapping[str, object]) -> AnyEvent:
    """Read one schema-v1 object back.

    Raises:
        ValueError: naming the problem for another schema version, an unknown kind or a missing
            or ill-typed field.
    """
    if obj.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"unsupported event schema_version {obj.get('schema_version')!r}")
    try:
        if obj.get("kind") == "event":
            return Event(
                name=str(obj["name"]),
                source=EventSource(obj["source"]),
                timestamp=float(obj["timestamp"]),  # type: ignore[arg-type]
                metadata=obj["metadata"],  # type: ignore[arg-type]
            )
        if obj.get("kind") == "rdzv":
            rank, local_id = obj.get("rank"), obj.get("local_id")
            return RdzvEvent(
                name=str(obj["name"]),
                run_id=str(obj["run_id"]),
                message=str(obj.get("message", "")),
                hostname=str(obj.get("hostname", "")),
                pid=int(obj.get("pid", 0)),  # type: ignore[call-overload]
                node_state=NodeState(obj["state"]),
                master_endpoint=str(obj.get("master_endpoint", "")),
                rank=None if rank is None else int(rank),  # type: ignore[call-overload]
                local_id=None if local_id is None else int(local_id),  # type: ignore[call-overload]
                error_trace=str(obj.get("error_trace", "")),
                round=int(obj["round"]),  # type: ignore[call-overload]
                node=str(obj["node"]),
                timestamp=float(obj["timestamp"]),  # type: ignore[arg-type]
            )
    except KeyError as exc:
        raise ValueError(f"event record lacks field {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"event record has a bad field: {exc}") from None
    raise ValueError(f"unknown event kind {obj.get('kind')!r}")


def to_json_line(event: AnyEvent) -> str:
    """One line of JSON (no newline inside), keys sorted so files diff cleanly."""
    return json.dumps(to_json_dict(event), sort_keys=True, separators=(",", ":"))


def read_json_lines(path: str | os.PathLike[str]) -> list[AnyEvent]:
    """Every event of a JSON-lines file, in file order; blank lines are skipped.

    Raises:
        ValueError: naming the file and line number of the first line that does not parse.
        OSError: if the file cannot be read.
    """
    events: list[AnyEvent] = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                events.append(from_json_dict(json.loads(line)))
            except ValueError as exc:  # json.JSONDecodeError is a ValueError too
                raise ValueError(f"{os.fspath(path)}:{number}: {exc}") from None
    return events


class EventHandler(Protocol):
    """Where events go. ``handle`` must neither block for long nor raise."""

    def handle(self, event: AnyEvent) -> None: ...


class NullEventHandler:
    """Drops every event."""

    def handle(self, event: AnyEvent) -> None:
        return None


class ConsoleEventHandler:
    """Writes each event as one JSON line to a stream (stderr unless given)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream

    def handle(self, event: AnyEvent) -> None:
        write_line(self._stream if self._stream is not None else sys.stderr, to_json_line(event))


class LoggingEventHandler:
    """Logs each event as one JSON line at INFO on the ``tpelastic.events`` logger."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._logger = logger or logging.getLogger(LOGGER_NAME)

    def handle(self, event: AnyEvent) -> None:
        self._logger.info("%s", to_json_line(event))


class JsonLinesEventHandler:
    """Appends each event as one line to a file (schema in docs/observability.md).

    Each record is written with a single ``write`` on an ``O_APPEND`` descriptor, so several
    processes may share one file without interleaving lines. A write that fails is reported once
    on the module logger and the event is dropped: recording must never stop the job.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._warned = False

    def handle(self, event: AnyEvent) -> None:
        data = (to_json_line(event) + "\n").encode("utf-8")
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError as exc:
            if not self._warned:
                self._warned = True
                _log.warning("cannot write events to %s: %s (dropping them)", self.path, exc)


_FACTORIES: Mapping[str, Callable[[], EventHandler]] = {
    "null": NullEventHandler,
    "console": ConsoleEventHandler,
    "logging": LoggingEventHandler,
}


def get_event_handler(destination: str) -> EventHandler:
    """The handler a destination name stands for.

    Names: ``null``, ``console``, ``logging`` and ``jsonl:<path>``.

    Raises:
        ValueError: naming the unknown destination and the known ones.
    """
    if destination.startswith("jsonl:") and len(destination) > len("jsonl:"):
        return JsonLinesEventHandler(destination[len("jsonl:") :])
    factory = _FACTORIES.get(destination)
    if factory is None:
        known = ", ".join([*_FACTORIES, "jsonl:<path>"])
        raise ValueError(f"unknown event destination {destination!r}; known: {known}")
    return factory()


def construct_and_record_rdzv_event(
    run_id: str,
    message: str,
    node_state: NodeState,
    name: str = "",
    hostname: str = "",
    pid: int | None = None,
    master_endpoint: str = "",
    local_id: int | None = None,
    rank: int | None = None,
    *,
    destination: str | EventHandler = "null",
) -> None:
    """Make an :class:`RdzvEvent` as torch's helper does and record it to ``destination``.

    The name is ``<caller's file>:<name or the caller's function>``; the host and pid default
    to this process's (``gethostname``: ``getfqdn`` may wait on DNS); a ``FAILED`` event raised
    inside an ``except`` block carries its traceback. With the ``null`` destination nothing is
    built.

    Raises:
        ValueError: only for an unknown destination name.
    """
    if destination == "null":
        return
    caller = sys._getframe(1)
    filename = os.path.basename(caller.f_code.co_filename)
    error_trace = ""
    if node_state == NodeState.FAILED and sys.exc_info()[1] is not None:
        import traceback

        error_trace = traceback.format_exc()
    if not hostname:
        import socket

        hostname = socket.gethostname()
    event = RdzvEvent(
        f"{filename}:{name or caller.f_code.co_name}",
        run_id,
        message,
        hostname,
        pid or os.getpid(),
        node_state,
        master_endpoint,
        rank,
        local_id,
        error_trace,
    )
    del caller  # a frame kept alive holds its locals
    record(event, destination)


def record(event: AnyEvent, destination: str | EventHandler = "null") -> None:
    """Send ``event`` to ``destination``: a handler object or a name for :func:`get_event_handler`.

    Raises:
        ValueError: only for an unknown destination name; handlers themselves never raise.
    """
    handler = get_event_handler(destination) if isinstance(destination, str) else destination
    handler.handle(event)
