"""Where a fault's recovery time goes: the phases from its injection to every rank stepping.

From the agents' logs (tpelastic's timestamped lines; other launchers' agents log in formats of
their own, so their agent phases stay empty) and the workers' lines, per fault:

    injected -> observed   the first agent line about it (a worker failed, a peer missed its
                           heartbeats, a keep-alive lapsed, a round opened, nodes waiting)
             -> opened     a round or in-place attempt opened (or this node re-joins)
             -> formed     the last agent of the settled world says it starts its workers
             -> spawned    the last worker process of that world started (its first line)
             -> imported   the last of them imported its framework (tensorplay or torch)
             -> joined     the last rank of it has its process group (RESUME: init_process_group
                           and the state shared from rank 0)
             -> stepping   every rank of it has completed a step after the fault (recovery)

A phase whose mark is missing (or out of order, e.g. a line of an earlier round) is None; the
next present mark is then measured from the last present one, so the phases always add up to
the recovery. ``through``: the settled world is the one that trained before the fault (the job
trained through it: the whole recovery is "stepping"); otherwise ``held`` is how long the world
before it still completed steps after the fault.
"""

from __future__ import annotations

import datetime
import re
import statistics
from pathlib import Path
from typing import Any

from chaos.checks import World, ended_by, ready_after, settled_world

STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}) \[tpelastic\] (.*)$")
OBSERVED = re.compile(
    r"failed|missed its heartbeats|lapsed|opened|nodes are waiting|stopping workers|store|"
    r"joining the (first|next) round"
)
OPENED = re.compile(r"round \d+ opened|attempt \d+ opened|restarting in place|joining the next")
FORMED = re.compile(r"starting \d+ worker\(s\)")
PHASES = ("observed", "opened", "formed", "spawned", "imported", "joined", "stepping")


def agent_lines(folder: Path, wall_minus_mono: float) -> list[dict[str, Any]]:
    """Every timestamped agent line of the episode, ``t`` on the harness' monotonic clock (the
    stamps are local wall time to the millisecond)."""
    found = []
    for path in sorted(folder.glob("*.log")):
        for raw in path.read_text(errors="replace").splitlines():
            match = STAMP.match(raw)
            if match is None:
                continue
            wall = datetime.datetime.fromisoformat(match.group(1)).timestamp()
            found.append({"t": wall - wall_minus_mono, "node": path.stem, "msg": match.group(2)})
    return sorted(found, key=lambda line: line["t"])


def _first(lines: list[dict[str, Any]], pattern: re.Pattern[str], t: float, until: float) -> float:
    for line in lines:
        if t <= line["t"] < until and pattern.search(line["msg"]):
            return float(line["t"])
    return float("nan")


def _formed(agents: list[dict[str, Any]], world: World, starts: dict[str, float]) -> float:
    """The last of the world's agents to say it starts the workers it trains with: per node,
    its last such line before its first worker of the world started."""
    marks = []
    for node in world.nodes:
        first = min(
            (starts[f] for f in world.files if f.startswith(f"{node}_") and f in starts),
            default=None,
        )
        if first is None:
            continue
        lines = [
            a["t"]
            for a in agents
            if a["node"] == node and a["t"] <= first and FORMED.search(a["msg"])
        ]
        if lines:
            marks.append(max(lines))
    return max(marks) if marks else float("nan")


def fault_timeline(
    fault: dict[str, Any],
    t_next: float,
    found: dict[str, World],
    starts: dict[str, float],
    agents: list[dict[str, Any]],
    imports: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The marks and phases of one injected fault (``t`` on the harness' clock)."""
    imports = imports or {}
    t = fault["t"]
    joining = fault["node"] if fault["fault"] == "new-node" else ""
    world, overlapped = settled_world(found, t, t_next, joining, ended_by(fault))
    marks: dict[str, float] = dict.fromkeys(PHASES, float("nan"))
    held = None
    through = False
    if world is not None:
        ready = ready_after(world, t)
        assert ready is not None
        files = [f for f in world.files if f in starts]
        first_in_world = min(world.first_by_rank.values())
        through = first_in_world < t
        others = [w for w in found.values() if w is not world]
        before = [s for w in others for steps in w.steps_by_rank.values() for s in steps]
        held = max((s - t for s in before if t < s < first_in_world), default=0.0)
        marks["observed"] = _first(agents, OBSERVED, t, ready)
        marks["opened"] = _first(agents, OPENED, t, ready)
        marks["formed"] = _formed(agents, world, starts)
        marks["spawned"] = max(starts[f] for f in files) if files else float("nan")
        done = [imports[f] for f in world.files if f in imports]
        marks["imported"] = max(done) if len(done) == len(world.files) else float("nan")
        joined = world.joined_by_rank
        marks["joined"] = max(joined.values()) if len(joined) == world.size else float("nan")
        marks["stepping"] = ready
    phases: dict[str, float | None] = {}
    last = t
    for name in PHASES:
        mark = marks[name]
        if mark != mark or mark < last:  # nan, or a line of an earlier round
            phases[name] = None
            continue
        phases[name] = round(mark - last, 3)
        last = mark
    return {
        "fault": fault["fault"],
        "node": fault.get("node", ""),
        "world": None if world is None else world.id,
        "overlapped": overlapped,
        "through": through,
        "held": None if held is None or through else round(held, 3),
        "phases": phases,
    }


def timelines(
    lines: list[dict[str, Any]],
    injected: list[dict[str, Any]],
    found: dict[str, World],
    agents: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    starts = {line["file"]: line["t"] for line in lines if line["kind"] == "START"}
    imports = {line["file"]: line["t"] for line in lines if line["kind"] == "IMPORTED"}
    faults = [f for f in injected if "t" in f]
    out = []
    for i, fault in enumerate(faults):
        t_next = faults[i + 1]["t"] if i + 1 < len(faults) else float("inf")
        out.append(fault_timeline(fault, t_next, found, starts, agents, imports))
    return out


def breakdown(results: list[dict[str, Any]], kinds: tuple[str, ...]) -> dict[str, Any]:
    """Per fault kind: the median of each phase over the faults where it was seen, and n.
    Faults whose recovery ran into the next fault are left out: their phases mix two."""
    out: dict[str, Any] = {}
    for kind in kinds:
        rows = [
            x
            for r in results
            for x in r.get("timeline", [])
            if x["fault"] == kind and not x["overlapped"]
        ]
        if not rows:
            continue
        entry: dict[str, Any] = {"n": len(rows), "through": sum(x["through"] for x in rows)}
        for name in (*PHASES, "held"):
            values = [
                x["held"] if name == "held" else x["phases"][name]
                for x in rows
                if (x["held"] if name == "held" else x["phases"][name]) is not None
            ]
            entry[name] = round(statistics.median(values), 2) if values else None
            entry[f"{name}_n"] = len(values)
        out[kind] = entry
    return out


def table(breakdowns: dict[str, dict[str, Any]]) -> str:
    """One table per launcher: median seconds of each phase, per fault kind."""
    parts = []
    head = ["fault (n)", *(f"→ {p}" for p in PHASES), "old world trained on", "trained through"]
    for launcher, kinds in breakdowns.items():
        rows = [f"{launcher}: median s per phase (n seen), faults not overlapped by the next", ""]
        rows.append("| " + " | ".join(head) + " |")
        rows.append("|" + "---|" * len(head))
        for kind, entry in kinds.items():
            cells = [f"{kind} ({entry['n']})"]
            for name in (*PHASES, "held"):
                value, n = entry[name], entry[f"{name}_n"]
                cells.append("-" if value is None else f"{value:g} ({n})")
            cells.append(str(entry["through"]))
            rows.append("| " + " | ".join(cells) + " |")
        parts.append("\n".join(rows))
    return "\n\n".join(parts)
