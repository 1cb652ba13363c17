"""The status record each agent publishes to the rendezvous store, and the job view built from
those records for ``tpelastic status``.

Record (JSON, ``"v": 1``, ``"kind": "tpelastic.status"``), one per node under
``tpelastic/v1/<run>/status/<node>``, written only by that node's agent and read only by
``tpelastic status``; no agent decides anything from it. Its fields are listed in
docs/observability.md ("Status records"). Ages and durations are seconds on the publisher's
own monotonic clock at publication (no wall-clock time is shared); ``seq`` counts the node's
publications, so a reader tells a fresh record from a stale one by watching it move.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.records import StateCorrupt, decode_counter, decode_result

STATUS_VERSION = 1
KIND = "tpelastic.status"
VIEW_VERSION = 1
_log = logging.getLogger(__name__)
# Ranks waiting in a collective this long (since their last step) make the view name the rank
# they wait for; shorter waits are ordinary skew between ranks.
STUCK_AFTER = 10.0
# A rank whose last step took this many times the median step time is a straggler.
STRAGGLER_FACTOR = 2.0
# Bounds the scan for the latest round past the published counter (which never overshoots).
_MAX_PROBES = 64

# field -> accepted types (None allowed where listed); every field is required.
_FIELDS: dict[str, tuple[type, ...]] = {
    "run_id": (str,),
    "node": (str,),
    "host": (str,),
    "pid": (int,),
    "role": (str,),
    "state": (str,),
    "round": (int,),
    "attempt": (int,),
    "group_rank": (int,),
    "group_world_size": (int,),
    "local_world_size": (int,),
    "restart_count": (int,),
    "max_restarts": (int,),
    "last_failure": (str, type(None)),
    "seq": (int,),
    "ranks": (list,),
}
_RANK_FIELDS: dict[str, tuple[type, ...]] = {
    "rank": (int,),
    "local_rank": (int,),
    "step": (int, type(None)),
    "age_s": (int, float, type(None)),
    "step_time_s": (int, float, type(None)),
    "waiting": (bool,),
    "collectives": (int,),
    "collective": (str,),
}


def status_key(run_id: str, node: str) -> str:
    """Where ``node`` of run ``run_id`` publishes its status record."""
    return f"{RunKeys(run_id).namespace}/status/{node}"


def _check(data: Mapping[str, Any], fields: Mapping[str, tuple[type, ...]], what: str) -> None:
    for name, kinds in fields.items():
        if name not in data:
            raise StateCorrupt(f"{what}: no {name!r}")
        value = data[name]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise StateCorrupt(f"{what}: {name!r} is {type(value).__name__}")


def encode_status(record: Mapping[str, Any]) -> bytes:
    """The record as JSON bytes, checked first.

    Raises:
        StateCorrupt: a field is missing or of the wrong type (a bug in the publisher).
    """
    body = {**record, "v": STATUS_VERSION, "kind": KIND}
    decode_status(json.dumps(body).encode("utf-8"))
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")


def decode_status(raw: bytes) -> dict[str, Any]:
    """A status record read back and validated completely (JSON only, never a pickle).

    Raises:
        StateCorrupt: not a status record of this version, naming what is wrong.
    """
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise StateCorrupt(f"status record: not JSON ({error})") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise StateCorrupt("status record: not a tpelastic status record")
    if data.get("v") != STATUS_VERSION:
        raise StateCorrupt(f"status record: unsupported version {data.get('v')!r}")
    _check(data, _FIELDS, "status record")
    for entry in data["ranks"]:
        if not isinstance(entry, dict):
            raise StateCorrupt("status record: a rank entry is not an object")
        _check(entry, _RANK_FIELDS, "status record rank")
    return data


class StatusPublisher:
    """Writes ``build()`` to ``store[key]`` every ``interval`` seconds and on :meth:`kick`,
    from a daemon thread, so a slow or lost store never holds up the agent's loop.

    A failed write is logged at debug level and retried at the next turn: the status view is
    best effort, the job must not depend on it.
    """

    def __init__(
        self, store: Any, key: str, build: Callable[[int], Mapping[str, Any]], interval: float
    ) -> None:
        self._store, self._key, self._build, self._interval = store, key, build, interval
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._seq = 0
        self._thread = threading.Thread(target=self._run, name="tpelastic-status", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def kick(self) -> None:
        """Publish soon (the state changed)."""
        self._wake.set()

    def close(self, timeout: float = 1.0) -> None:
        """Publish once more (the final state), then stop; waits at most ``timeout`` s."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout)

    def _run(self) -> None:
        while True:
            self._publish()
            if self._stop.is_set():
                return
            self._wake.wait(self._interval)
            self._wake.clear()

    def _publish(self) -> None:
        try:
            self._store.set(self._key, encode_status(self._build(self._seq)))
            self._seq += 1
        except Exception as error:  # best effort: never fail the agent for its status
            _log.debug("status record not published: %s", error)


def latest_round(store: Any, run_id: str) -> int | None:
    """The number of the run's latest completed round, or None before the first."""
    keys = RunKeys(run_id)
    start = decode_counter(store.get(keys.published_rounds()))
    for round_no in range(max(0, start - 1), start + _MAX_PROBES):
        if store.get(keys.result(round_no)) is None:
            return round_no - 1 if round_no > 0 else None
    return start + _MAX_PROBES - 1


def read_view(store: Any, run_id: str, slowest: int = 3) -> dict[str, Any]:
    """The job as the status command shows it, read from ``store`` without writing to it.

    Returns a dict (``"v": 1``): ``run_id``, ``closed`` (the terminal outcome or None),
    ``round``, ``restart_count``, ``members`` (rank order: ``node``, ``addr``, ``rank`` and the
    node's status record or None), ``ranks`` (every published rank with its ``node``),
    ``slowest`` (the ``slowest`` ranks by last step time), ``last_failure`` (the first member's
    recorded failure, as ``{"node", "reason"}``) and ``problems`` (records that could not be
    read). See docs/observability.md.
    """
    keys = RunKeys(run_id)
    problems: list[str] = []
    closed_raw = store.get(keys.closed())
    round_no = latest_round(store, run_id)
    result = None
    while round_no is not None and result is None:
        raw = store.get(keys.result(round_no))
        try:
            result = decode_result(raw) if raw is not None else None
        except StateCorrupt as error:
            problems.append(f"round {round_no} result: {error}")
            break
        if result is not None and result.closed:  # the close's placeholder: show the last world
            result = None
            round_no = round_no - 1 if round_no > 0 else None
    participants = list(result.participants) if result is not None else []
    records = _records(store, run_id, [p.node for p in participants], problems)
    members: list[dict[str, Any]] = [
        {"rank": rank, "node": p.node, "addr": p.addr, "status": records.get(p.node)}
        for rank, p in enumerate(participants)
    ]
    ranks = [
        {**entry, "node": m["node"], "host": m["status"]["host"], "node_rank": m["rank"]}
        for m in members
        if m["status"] is not None
        for entry in m["status"]["ranks"]
    ]
    timed = [r for r in ranks if r.get("step_time_s") is not None]
    timed.sort(key=lambda r: (-float(r["step_time_s"]), r["rank"]))
    failure = next(
        (
            {"node": m["node"], "reason": m["status"]["last_failure"]}
            for m in members
            if m["status"] is not None and m["status"]["last_failure"]
        ),
        None,
    )
    restarts = result.restart_count if result is not None else 0
    published = [m["status"]["restart_count"] for m in members if m["status"] is not None]
    return {
        "v": VIEW_VERSION,
        "run_id": run_id,
        "closed": _closed_outcome(closed_raw),
        "round": round_no,
        "restart_count": max([restarts, *published]),
        "max_restarts": next((m["status"]["max_restarts"] for m in members if m["status"]), None),
        "attempt": max((m["status"]["attempt"] for m in members if m["status"]), default=0),
        "members": members,
        "ranks": sorted(ranks, key=lambda r: r["rank"]),
        "slowest": timed[:slowest],
        "stuck": stuck_rank(ranks),
        "stragglers": stragglers(ranks),
        "last_failure": failure,
        "problems": problems,
    }


def behind(ranks: Sequence[Mapping[str, Any]], entered: int) -> Mapping[str, Any] | None:
    """The rank that never reached collective number ``entered``: among ranks not waiting in
    a collective, the one that entered the fewest (fewer than ``entered``); None if none did."""
    late = [r for r in ranks if not r.get("waiting") and int(r.get("collectives", 0)) < entered]
    late.sort(key=lambda r: (int(r.get("collectives", 0)), int(r["rank"])))
    return late[0] if late else None


def stuck_rank(
    ranks: Sequence[Mapping[str, Any]], after: float = STUCK_AFTER
) -> dict[str, Any] | None:
    """A rank the others wait for: ranks have waited in a collective for ``after`` seconds or
    more (by their step ages) and one rank never reached it. None when nobody waits that long.
    """
    waiting = [
        r for r in ranks if r.get("waiting") and r.get("age_s") is not None and r["age_s"] >= after
    ]
    if not waiting:
        return None
    target = max(int(r["collectives"]) for r in waiting)
    late = behind(ranks, target)
    if late is None:
        return None
    name = next((r["collective"] for r in waiting if int(r["collectives"]) == target), "")
    return {
        "rank": late["rank"],
        "node": late["node"],
        "node_rank": late.get("node_rank"),
        "host": late.get("host", ""),
        "collective": name,
        "collective_number": target,
        "waiting_ranks": sorted(int(r["rank"]) for r in waiting),
        "its_collectives": late["collectives"],
        "its_step": late["step"],
    }


def stragglers(
    ranks: Sequence[Mapping[str, Any]], factor: float = STRAGGLER_FACTOR
) -> list[dict[str, Any]]:
    """Ranks whose last step took ``factor`` times the median step time of ``ranks`` or more
    (slowest first), each with its ``ratio`` to the median; [] with fewer than 2 timed ranks."""
    timed = [r for r in ranks if r.get("step_time_s") is not None]
    if len(timed) < 2:
        return []
    median = _median([float(r["step_time_s"]) for r in timed])
    if median <= 0:
        return []
    slow = [
        {**r, "ratio": round(float(r["step_time_s"]) / median, 2)}
        for r in timed
        if float(r["step_time_s"]) >= factor * median
    ]
    return sorted(slow, key=lambda r: (-r["ratio"], r["rank"]))


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _records(
    store: Any, run_id: str, nodes: Sequence[str], problems: list[str]
) -> dict[str, dict[str, Any]]:
    keys = [status_key(run_id, node) for node in nodes]
    multi = getattr(store, "multi_get", None)
    raws = multi(keys) if multi is not None and keys else [store.get(k) for k in keys]
    found: dict[str, dict[str, Any]] = {}
    for node, raw in zip(nodes, raws, strict=True):
        if raw is None:
            continue
        try:
            found[node] = decode_status(raw)
        except StateCorrupt as error:
            problems.append(f"node {node}: {error}")
    return found


def _closed_outcome(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    from tpelastic.core.rendezvous.records import decode_closed

    try:
        return decode_closed(raw).outcome
    except StateCorrupt:
        return "closed"


__all__ = [
    "STATUS_VERSION",
    "StatusPublisher",
    "decode_status",
    "encode_status",
    "latest_round",
    "read_view",
    "status_key",
]
