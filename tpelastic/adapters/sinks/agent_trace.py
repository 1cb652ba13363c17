"""The agent's step records: how each transition is written as an event, and the replay check.

The agent records one ``agent.step`` event per call of the core's step function (see
docs/observability.md, "Agent step records"). Because the record holds the observation with
every field, the agent's configuration and what the step produced, the stream can be fed back
through :func:`tpelastic.core.agent.step` from the initial state: :func:`replay_agent_events`
does that and names the first record the core disagrees with.

Only the core and attrs are imported here, so the agent loads this module only when events are
recorded at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from tpelastic.adapters.sinks.events import AnyEvent, Event, EventSource, Json, to_json_value
from tpelastic.core import agent as core
from tpelastic.core.worker_group import WorkerFailure

STEP_EVENT = "agent.step"
_EVENT_TYPES: dict[str, type] = {cls.__name__: cls for cls in core.AGENT_EVENTS}


class ReplayMismatch(ValueError):
    """A recorded step the core would not take (or a gap in the records); the message says which."""


def to_json_obj(value: object) -> Json:
    """``value`` (an attrs value of the core, or plain data) as JSON, with ``type`` for classes."""
    if attrs.has(type(value)):
        names = [f.name for f in attrs.fields(type(value))]  # type: ignore[arg-type]
        fields = {name: to_json_obj(getattr(value, name)) for name in names}
        return {"type": type(value).__name__, **fields}
    if isinstance(value, (list, tuple)):
        return [to_json_obj(v) for v in value]
    return to_json_value(value)


def decode_observation(obj: Mapping[str, Any]) -> core.AgentEventT:
    """The core observation a step record's ``event`` object describes.

    Raises:
        ReplayMismatch: for an unknown observation type or fields that do not fit it.
    """
    kind = str(obj.get("type"))
    cls = _EVENT_TYPES.get(kind)
    if cls is None:
        raise ReplayMismatch(f"unknown agent observation type {kind!r}")
    fields = {k: v for k, v in obj.items() if k != "type"}
    if "failures" in fields:
        fields["failures"] = tuple(
            WorkerFailure(**{k: v for k, v in f.items() if k != "type"}) for f in fields["failures"]
        )
    try:
        return cls(**fields)  # type: ignore[no-any-return]
    except (TypeError, ValueError) as error:
        raise ReplayMismatch(f"bad {kind} observation: {error}") from None


def config_json(config: core.AgentConfig) -> Json:
    return to_json_obj(config)


def step_event(
    *,
    agent: str,
    seq: int,
    config: core.AgentConfig,
    before: core.AgentState,
    observation: object,
    result: Any,
    now_wall: float,
) -> Event:
    """The ``agent.step`` event for one step (``result`` is the core's ``Step``)."""
    return Event(
        name=STEP_EVENT,
        source=EventSource.AGENT,
        timestamp=now_wall,
        metadata={
            "agent": agent,
            "seq": seq,
            "config": config_json(config),
            "from": before.phase.name,
            "event": to_json_obj(observation),
            "to": result.state.phase.name,
            "state": to_json_obj(result.state),
            "effects": to_json_obj(result.effects),
        },
    )


@attrs.frozen(kw_only=True)
class Replayed:
    """What the replay of one agent's records reached."""

    agent: str
    steps: int
    state: core.AgentState


def _config(meta: Mapping[str, Any]) -> core.AgentConfig:
    try:
        cfg = {k: v for k, v in dict(meta["config"]).items() if k != "type"}
        return core.AgentConfig(**cfg)
    except (KeyError, TypeError, ValueError) as error:
        raise ReplayMismatch(f"bad agent config in the records: {error}") from None


def _check_one(
    where: str, recorded: Mapping[str, Any], state: core.AgentState, result: Any
) -> None:
    expected = {
        "to": result.state.phase.name,
        "state": to_json_obj(result.state),
        "effects": to_json_obj(result.effects),
    }
    for key, want in expected.items():
        if recorded.get(key) != want:
            raise ReplayMismatch(
                f"{where}: recorded {key} {recorded.get(key)!r}, the core gives {want!r}"
            )


def replay_agent_events(events: Iterable[AnyEvent]) -> dict[str, Replayed]:
    """Replay every agent's ``agent.step`` records through the core, from the initial state.

    Other events (rendezvous events, warnings, worker events) are skipped. Records are grouped
    by their ``agent`` id (several agents may share one file) and must be numbered 0, 1, 2, ...
    per agent, so a lost record is found too.

    Returns:
        Per agent id, how many steps replayed and the state they reached.

    Raises:
        ReplayMismatch: naming the agent and step where a record is missing, starts from a
            different phase, or ends in a state or effects the core would not produce.
    """
    replays: dict[str, tuple[core.AgentConfig, core.AgentState, int]] = {}
    for event in events:
        if not isinstance(event, Event) or event.name != STEP_EVENT:
            continue
        meta = event.metadata
        agent = str(meta.get("agent"))
        if agent not in replays:
            config = _config(meta)
            replays[agent] = (config, core.initial_state(config), 0)
        config, state, seq = replays[agent]
        where = f"agent {agent} step {meta.get('seq')}"
        if meta.get("seq") != seq:
            raise ReplayMismatch(f"{where}: expected step {seq} (a record is missing or repeated)")
        if _config(meta) != config:
            raise ReplayMismatch(f"{where}: the agent's config changed mid-run")
        if meta.get("from") != state.phase.name:
            raise ReplayMismatch(
                f"{where}: recorded from {meta.get('from')}, replay is in {state.phase.name}"
            )
        try:
            observation = decode_observation(dict(meta.get("event") or {}))  # type: ignore[arg-type]
        except ReplayMismatch as error:
            raise ReplayMismatch(f"{where}: {error}") from None
        result = core.step(state, observation, config)
        _check_one(where, meta, state, result)
        replays[agent] = (config, result.state, seq + 1)
    return {a: Replayed(agent=a, steps=n, state=s) for a, (_c, s, n) in replays.items()}


__all__ = [
    "STEP_EVENT",
    "ReplayMismatch",
    "Replayed",
    "decode_observation",
    "replay_agent_events",
    "step_event",
    "to_json_obj",
]
