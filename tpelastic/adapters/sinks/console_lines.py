"""The agent's console lines about membership and outcomes: who joined, left or died, what the
node waits for until when, and one final line per outcome with the right wording.

Everything here reads the store (the rendezvous keys, never a pickle) or formats text; the
agent's observers call it at the moments the core's steps mark (a round opened, a join, a
round joined), so the loop itself prints none of it.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Sequence
from typing import Any

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.records import StateCorrupt, decode_reason


def _names(nodes: Sequence[Any], shown: int = 5) -> str:
    """Up to ``shown`` nodes by id and address, then how many more (a world may be large)."""
    text = ", ".join(f"{n.node} ({n.addr})" if n.addr else n.node for n in nodes[:shown])
    return text + (f" and {len(nodes) - shown} more" if len(nodes) > shown else "")


def gone_reasons(store: Any, run_id: str, round_no: int, previous: Any) -> dict[str, str]:
    """For each member of ``previous`` (a RoundResult) marked gone before round ``round_no``:
    ``left`` or ``dead`` (the mark's reason), by node id."""
    keys = RunKeys(run_id)
    found: dict[str, str] = {}
    for rank, info in enumerate(previous.participants):
        raw = store.get(keys.gone(round_no, rank))
        if raw is None:
            continue
        try:
            found[info.node] = decode_reason(raw)
        except StateCorrupt:
            found[info.node] = "gone"
    return found


def _verb(why: str) -> str:
    return {"left": "left", "dead": "died (no heartbeat)"}.get(why, why)


def opened_line(round_no: int, reason: str, gone: dict[str, str]) -> str:
    """``round 2 opened: node a:1:x left; node b:2:y died (no heartbeat)``."""
    if gone:
        who = "; ".join(f"node {node} {_verb(why)}" for node, why in sorted(gone.items()))
    else:
        who = {
            "scale_up": "nodes are waiting to join",
            "failure": "a worker failed",
            "membership": "the membership changed",
        }.get(reason, reason)
    return f"round {round_no} opened: {who}"


def joined_line(previous: Any, result: Any, gone: dict[str, str]) -> str:
    """``round 2: 3 nodes; joined: ...; left: ...; died: ...; did not come back: ...``."""
    before = {n.node: n for n in previous.participants} if previous is not None else {}
    now = {n.node: n for n in result.participants}
    parts = [f"round {result.round_no}: {len(now)} node{'s' if len(now) != 1 else ''}"]
    if previous is not None:
        joined = [n for node, n in now.items() if node not in before]
        missing = [n for node, n in before.items() if node not in now]
        if joined:
            parts.append(f"joined: {_names(joined)}")
        for why, label in (("left", "left"), ("dead", "died")):
            these = [n for n in missing if gone.get(n.node) == why]
            if these:
                parts.append(f"{label}: {_names(these)}")
        other = [n for n in missing if gone.get(n.node) not in ("left", "dead")]
        if other:
            parts.append(f"did not come back: {_names(other)}")
        if not joined and not missing:
            parts.append("same members")
    return "; ".join(parts)


def waiting_line(config: Any, round_hint: str, now_wall: float | None = None) -> str:
    """What a joining node waits for, until when (local wall-clock time, for people only)."""
    now_wall = SYSTEM_CLOCK.wall() if now_wall is None else now_wall
    until = time.strftime("%H:%M:%S", time.localtime(now_wall + config.join_timeout))
    want = (
        f"{config.min_nodes} node{'s' if config.min_nodes != 1 else ''}"
        if config.min_nodes == config.max_nodes
        else f"{config.min_nodes}..{config.max_nodes} nodes"
    )
    late = (
        f"; {config.last_call_timeout:g} s more for late nodes once {config.min_nodes} arrived"
        if config.min_nodes != config.max_nodes
        else ""
    )
    return (
        f"joining {round_hint}: waiting for {want} until {until} "
        f"(join timeout {config.join_timeout:g} s{late})"
    )


def outcome_line(reason: str, exit_code: int) -> str:
    """The final line: a node stopped by a signal left the job (the others may go on); any
    other non-zero end is the job failing."""
    if exit_code > 128 and reason.startswith("interrupted by signal"):
        try:
            name = signal.Signals(exit_code - 128).name
        except ValueError:
            name = f"signal {exit_code - 128}"
        return (
            f"tpelastic: this node left the job: stopped by {name} (exit code {exit_code}); "
            "the other nodes go on without it if the job allows"
        )
    return f"tpelastic: job failed (exit code {exit_code}): {reason}"


COLLATERAL_NOTE = (
    "Tracebacks of other ranks that name a closed connection or a lost peer (gloo's "
    "'Connection closed by peer') are collateral: those ranks lost the failed one."
)


class RepeatCollapser:
    """A logging filter that prints a long reason once: a line ending in a reason (of at least
    ``min_len`` characters) that an earlier line already gave ends in ``(the reason above)``.

    The agent's lines nest one failure's reason (``worker rank 1 failed: R``, then ``stopping
    workers: worker local rank 1 failed: R``); a gloo reason is 300 characters.
    """

    def __init__(self, min_len: int = 60, keep: int = 16) -> None:
        self._seen: list[str] = []
        self._min_len, self._keep = min_len, keep

    def filter(self, record: Any) -> bool:
        message = record.getMessage()
        for reason in self._seen:
            if message.endswith(reason) and len(message) > len(reason):
                record.msg, record.args = message[: -len(reason)] + "(the reason above)", ()
                return True
        head, sep, tail = message.partition(": ")
        while sep and len(tail) >= self._min_len:
            self._seen = [tail, *[s for s in self._seen if s != tail]][: self._keep]
            head, sep, tail = tail.partition(": ")
        return True


__all__ = [
    "RepeatCollapser",
    "gone_reasons",
    "joined_line",
    "opened_line",
    "outcome_line",
    "waiting_line",
]
