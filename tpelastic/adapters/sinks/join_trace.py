"""The rendezvous join's step records: one ``rdzv.step`` event per step, and their replay.

The driver (:mod:`tpelastic.adapters.rendezvous.driver`) hands every step of the core's join
machine to a recorder when one is installed; the agent installs one when events are on. A record
holds the observation with every field (store replies included, bytes as base64), so a join can
be fed back through :func:`tpelastic.core.rendezvous.join.step` from a fresh ``JoinState``:
:func:`replay_join_events` does that and names the first record the core disagrees with.

Effects are recorded as a summary (the type; for store batches each op's type and key; for a
success the round and rank), not in full: a closer's publish carries the whole round result, and
the replies recorded in the next step already hold what the store answered.
"""

from __future__ import annotations

import base64
import enum
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from tpelastic.adapters.sinks.events import AnyEvent, Event, EventSource, Json
from tpelastic.core.rendezvous import join
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.ops import JoinSucceeded, OpsDone, StoreOps, WaitEnded
from tpelastic.core.rendezvous.state import JoinRequested, JoinState

STEP_EVENT = "rdzv.step"
_EVENT_TYPES: dict[str, type] = {cls.__name__: cls for cls in (JoinRequested, OpsDone, WaitEnded)}


class JoinReplayMismatch(ValueError):
    """A recorded join step the core would not take (or a gap); the message says which."""


def encode(value: object) -> Json:
    """``value`` as JSON that :func:`decode` reads back exactly (bytes as ``{"b64": ...}``)."""
    if isinstance(value, enum.Enum):
        return value.name
    if attrs.has(type(value)):
        names = [f.name for f in attrs.fields(type(value)) if f.init]  # type: ignore[arg-type]
        return {"type": type(value).__name__, **{n: encode(getattr(value, n)) for n in names}}
    if isinstance(value, (bytes, bytearray)):
        return {"b64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot record a {type(value).__name__} in a join step")


def decode(obj: Any) -> Any:
    """The value :func:`encode` wrote; lists come back as tuples, typed objects as themselves.

    Raises:
        JoinReplayMismatch: for an unknown type or fields that do not fit it.
    """
    if isinstance(obj, list):
        return tuple(decode(v) for v in obj)
    if not isinstance(obj, dict):
        return obj
    if set(obj) == {"b64"}:
        return base64.b64decode(obj["b64"])
    kind = obj.get("type")
    cls = _EVENT_TYPES.get(str(kind))
    if cls is None:
        raise JoinReplayMismatch(f"unknown join observation type {kind!r}")
    try:
        return cls(**{k: decode(v) for k, v in obj.items() if k != "type"})
    except (TypeError, ValueError) as error:
        raise JoinReplayMismatch(f"bad {kind} observation: {error}") from None


def effects_summary(effects: Iterable[object]) -> list[Json]:
    """What a step ordered, in the short form the records keep."""
    summary: list[Json] = []
    for effect in effects:
        name = type(effect).__name__
        if isinstance(effect, StoreOps):
            ops: list[Json] = [[type(op).__name__, op.key] for op in effect.ops]
            summary.append({"type": name, "ops": ops})
        elif isinstance(effect, JoinSucceeded):
            summary.append({"type": name, "round": effect.result.round_no, "rank": effect.rank})
        elif name in ("StoreWait", "JoinFailed", "Rejected", "Emit"):
            summary.append(encode(effect))
        else:
            summary.append({"type": name})
    return summary


def step_event(
    *,
    run_id: str,
    node: str,
    join_no: int,
    seq: int,
    config: RendezvousConfig,
    before: JoinState,
    observation: object,
    result: Any,
    now_wall: float,
) -> Event:
    """The ``rdzv.step`` event for one step of one join (``result`` is the core's ``Step``)."""
    metadata: dict[str, Json] = {
        "run_id": run_id,
        "node": node,
        "join": join_no,
        "seq": seq,
        "from": before.phase.name,
        "event": encode(observation),
        "to": result.state.phase.name,
        "effects": effects_summary(result.effects),
    }
    if seq == 0:
        metadata["config"] = encode(config)
    return Event(name=STEP_EVENT, source=EventSource.AGENT, timestamp=now_wall, metadata=metadata)


@attrs.frozen(kw_only=True)
class ReplayedJoin:
    """What the replay of one join's records reached."""

    node: str
    join_no: int
    steps: int
    phase: str


def _config(meta: Mapping[str, Any], where: str) -> RendezvousConfig:
    try:
        fields = {k: v for k, v in dict(meta["config"]).items() if k != "type"}
        return RendezvousConfig(**fields)
    except (KeyError, TypeError, ValueError) as error:
        raise JoinReplayMismatch(
            f"{where}: bad rendezvous config in the records: {error}"
        ) from None


def _replay_one(
    where: str, meta: Mapping[str, Any], config: RendezvousConfig, state: JoinState
) -> JoinState:
    if meta.get("from") != state.phase.name:
        raise JoinReplayMismatch(
            f"{where}: recorded from {meta.get('from')}, replay is in {state.phase.name}"
        )
    try:
        observation = decode(meta.get("event"))
    except JoinReplayMismatch as error:
        raise JoinReplayMismatch(f"{where}: {error}") from None
    result = join.step(state, observation, config)
    expected = {"to": result.state.phase.name, "effects": effects_summary(result.effects)}
    for key, want in expected.items():
        if meta.get(key) != want:
            raise JoinReplayMismatch(
                f"{where}: recorded {key} {meta.get(key)!r}, the core gives {want!r}"
            )
    return result.state


def replay_join_events(events: Iterable[AnyEvent]) -> list[ReplayedJoin]:
    """Replay every join's ``rdzv.step`` records through the core, each from a fresh state.

    Records are grouped by (node, join number) and must be numbered 0, 1, 2, ... within a join,
    so a lost record is found too; other events are skipped.

    Returns:
        One entry per join: how many steps replayed and the phase reached.

    Raises:
        JoinReplayMismatch: naming the node, join and step where a record is missing, starts
            from a different phase, or ends in a phase or effects the core would not produce.
    """
    joins: dict[tuple[str, int], tuple[RendezvousConfig, JoinState, int]] = {}
    for event in events:
        if not isinstance(event, Event) or event.name != STEP_EVENT:
            continue
        meta = event.metadata
        key = (str(meta.get("node")), int(meta.get("join") or 0))  # type: ignore[arg-type]
        where = f"node {key[0]} join {key[1]} step {meta.get('seq')}"
        if key not in joins:
            if meta.get("seq") != 0:
                raise JoinReplayMismatch(f"{where}: the join's first record is missing")
            joins[key] = (_config(meta, where), JoinState(), 0)
        config, state, seq = joins[key]
        if meta.get("seq") != seq:
            raise JoinReplayMismatch(
                f"{where}: expected step {seq} (a record is missing or repeated)"
            )
        joins[key] = (config, _replay_one(where, meta, config, state), seq + 1)
    return [
        ReplayedJoin(node=node, join_no=no, steps=n, phase=state.phase.name)
        for (node, no), (_config_, state, n) in joins.items()
    ]


__all__ = [
    "STEP_EVENT",
    "JoinReplayMismatch",
    "ReplayedJoin",
    "decode",
    "effects_summary",
    "encode",
    "replay_join_events",
    "step_event",
]
