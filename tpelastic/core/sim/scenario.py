"""A simulation scenario as data: nodes, bounds, timeouts, latency, faults at times or at rates.

A scenario is a plain value; :func:`scenario_from_dict` builds one from the mapping a TOML or
JSON file parses to (reading the file is the adapters' job) and names the first problem it finds
in one line. Nodes are called ``node0 .. node<N-1>``; late joiners get the names their ``join``
faults give them (``late<k>`` when unnamed).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from attrs import field, frozen

from tpelastic.core.rendezvous.config import RendezvousConfig

# kind -> what it does; "node" faults pick a node at random (from the seed) when none is named.
FAULT_KINDS = {
    "crash": "the node dies without a goodbye",
    "leave": "a training node leaves gracefully",
    "join": "a new node starts (a late joiner)",
    "fail_workers": "a training node's workers fail: its round restarts in place (or re-forms)",
    "lose_heartbeats": "the node's heartbeats stop landing for good",
    "partition": "the node cannot reach the store for `duration` seconds (0: for good)",
    "slow": "the node's store batches take `extra_latency` more seconds for `duration`",
    "store_down": "the store answers nobody for `duration` seconds",
    "close": "a training node closes the rendezvous (the job ends)",
    "pause": "a training node's process stops for `duration` seconds, then resumes",
    "store_pause": "the store's process stops for `duration` seconds: batches wait",
    "store_host_death": "the node hosting the store dies, the store with it (default node0)",
    "delay": "every batch takes `extra_latency` more seconds for `duration` (0: for good)",
}
RATE_KINDS = frozenset(
    {"crash", "leave", "join", "fail_workers", "partition", "slow", "pause", "delay"}
)
STORE_ERROR_POLICIES = frozenset({"exit", "retry"})


class ScenarioError(ValueError):
    """A scenario is malformed; the message names the field and the problem in one line."""


def _kind(_instance: object, _attribute: object, value: str) -> None:
    if value not in FAULT_KINDS:
        raise ScenarioError(f"unknown fault kind {value!r}; known: {', '.join(FAULT_KINDS)}")


def _non_negative(_instance: object, attribute: Any, value: float) -> None:
    if not (value >= 0 and math.isfinite(value)):
        raise ScenarioError(f"{attribute.name} must be a finite number >= 0, got {value!r}")


@frozen(kw_only=True)
class Fault:
    """One fault at virtual instant ``at``. ``node`` empty: a node drawn from the seed."""

    at: float = field(validator=_non_negative)
    kind: str = field(validator=_kind)
    node: str = ""
    duration: float = field(default=0.0, validator=_non_negative)
    extra_latency: float = field(default=0.0, validator=_non_negative)


@frozen(kw_only=True)
class FaultRate:
    """Faults of one kind arriving at random (a Poisson process), on average every ``every`` s,
    between ``start`` and ``stop``, at most ``limit`` of them (0: no limit)."""

    kind: str = field(validator=_kind)
    every: float = field(validator=_non_negative)
    start: float = field(default=0.0, validator=_non_negative)
    stop: float = math.inf
    limit: int = 0
    duration: float = field(default=0.0, validator=_non_negative)
    extra_latency: float = field(default=0.0, validator=_non_negative)

    def __attrs_post_init__(self) -> None:
        if self.kind not in RATE_KINDS:
            raise ScenarioError(f"fault kind {self.kind!r} cannot come at a rate")
        if self.every <= 0:
            raise ScenarioError(f"rate of {self.kind!r}: every must be > 0, got {self.every}")


@frozen(kw_only=True)
class Scenario:
    """Everything a simulated run depends on; the same scenario and seed give the same trace."""

    name: str = "scenario"
    nodes: int
    config: RendezvousConfig
    duration: float = field(validator=_non_negative)
    seed: int = 0
    latency: float = field(default=0.0, validator=_non_negative)
    start_spread: float = field(default=0.0, validator=_non_negative)
    on_store_error: str = "exit"
    retry_after: float = field(default=5.0, validator=_non_negative)
    faults: tuple[Fault, ...] = ()
    rates: tuple[FaultRate, ...] = ()
    # A worker failure restarts the round's workers in place as its next attempt (True), or the
    # failed node re-joins and the round re-forms (False: a rendezvous without attempts).
    restart_in_place: bool = True
    # The job's restart budget (None: unbounded, every failure of a training node restarts).
    max_restarts: int | None = None
    # A crash fails the workers of the peers training with the crashed node (as collective
    # workers fail on a lost peer), so the agents see a peer's loss as worker failures first.
    peer_loss_fails_workers: bool = False
    # How long a store that does not answer is waited out (a refused one: heartbeat_timeout).
    read_timeout: float = field(default=60.0, validator=_non_negative)

    def __attrs_post_init__(self) -> None:
        if self.max_restarts is not None and self.max_restarts < 0:
            raise ScenarioError(f"max_restarts must be >= 0, got {self.max_restarts}")
        if self.nodes < 0:
            raise ScenarioError(f"nodes must be >= 0, got {self.nodes}")
        if self.on_store_error not in STORE_ERROR_POLICIES:
            raise ScenarioError(
                f"on_store_error must be one of {sorted(STORE_ERROR_POLICIES)}, "
                f"got {self.on_store_error!r}"
            )


_CONFIG_KEYS = (
    "min_nodes",
    "max_nodes",
    "join_timeout",
    "last_call_timeout",
    "heartbeat_interval",
    "heartbeat_timeout",
)
_TOP_KEYS = frozenset(
    {"name", "nodes", "duration", "seed", "latency", "start_spread", "on_store_error"}
    | {"retry_after", "faults", "rates", "restart_in_place", *_CONFIG_KEYS}
    | {"max_restarts", "peer_loss_fails_workers", "read_timeout"}
)


def scenario_from_dict(data: Mapping[str, Any]) -> Scenario:
    """Build a :class:`Scenario` from parsed TOML/JSON.

    Raises:
        ScenarioError: one line naming the first unknown key, missing key or bad value.
    """
    _no_unknown(data, _TOP_KEYS, "scenario")
    for key in ("nodes", "min_nodes", "max_nodes", "duration"):  # no sensible defaults
        if key not in data:
            raise ScenarioError(f"scenario lacks {key!r}")
    try:
        config = RendezvousConfig(
            min_nodes=int(_number(data, "min_nodes")),
            max_nodes=int(_number(data, "max_nodes")),
            **{k: _number(data, k) for k in _CONFIG_KEYS[2:] if k in data},
        )
        return Scenario(
            name=str(data.get("name", "scenario")),
            nodes=int(_number(data, "nodes")),
            config=config,
            duration=float(_number(data, "duration")),
            seed=int(_number(data, "seed", 0)),
            latency=float(_number(data, "latency", 0.0)),
            start_spread=float(_number(data, "start_spread", 0.0)),
            on_store_error=str(data.get("on_store_error", "exit")),
            retry_after=float(_number(data, "retry_after", 5.0)),
            faults=tuple(_fault(f, i) for i, f in enumerate(_list(data, "faults"))),
            rates=tuple(_rate(r, i) for i, r in enumerate(_list(data, "rates"))),
            restart_in_place=_flag(data, "restart_in_place", True),
            max_restarts=int(_number(data, "max_restarts")) if "max_restarts" in data else None,
            peer_loss_fails_workers=_flag(data, "peer_loss_fails_workers", False),
            read_timeout=float(_number(data, "read_timeout", 60.0)),
        )
    except ScenarioError:
        raise
    except (TypeError, ValueError) as error:
        raise ScenarioError(str(error)) from None


def _fault(item: object, index: int) -> Fault:
    where = f"faults[{index}]"
    entry = _table(item, where)
    _no_unknown(entry, frozenset({"at", "kind", "node", "duration", "extra_latency"}), where)
    if "at" not in entry or "kind" not in entry:
        raise ScenarioError(f"{where} needs 'at' and 'kind'")
    return Fault(
        at=float(_number(entry, "at")),
        kind=str(entry["kind"]),
        node=str(entry.get("node", "")),
        duration=float(_number(entry, "duration", 0.0)),
        extra_latency=float(_number(entry, "extra_latency", 0.0)),
    )


def _rate(item: object, index: int) -> FaultRate:
    where = f"rates[{index}]"
    entry = _table(item, where)
    known = frozenset({"kind", "every", "start", "stop", "limit", "duration", "extra_latency"})
    _no_unknown(entry, known, where)
    if "kind" not in entry or "every" not in entry:
        raise ScenarioError(f"{where} needs 'kind' and 'every'")
    return FaultRate(
        kind=str(entry["kind"]),
        every=float(_number(entry, "every")),
        start=float(_number(entry, "start", 0.0)),
        stop=float(_number(entry, "stop", math.inf)),
        limit=int(_number(entry, "limit", 0)),
        duration=float(_number(entry, "duration", 0.0)),
        extra_latency=float(_number(entry, "extra_latency", 0.0)),
    )


def _table(item: object, where: str) -> Mapping[str, Any]:
    if not isinstance(item, Mapping):
        raise ScenarioError(f"{where} must be a table, got {type(item).__name__}")
    return item


def _list(data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise ScenarioError(f"{key} must be a list of tables, got {type(value).__name__}")
    return value


def _number(data: Mapping[str, Any], key: str, default: float | None = None) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ScenarioError(f"{key} must be a number, got {value!r}")
    return value


def _flag(data: Mapping[str, Any], key: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise ScenarioError(f"{key} must be true or false, got {value!r}")
    return value


def _no_unknown(data: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise ScenarioError(
            f"{where}: unknown key {unknown[0]!r}; known: {', '.join(sorted(known))}"
        )
