"""The five checks of an episode and its recovery times, from the workers' lines and the harness'
record of what it did.

1. One world at a time: the span of a world is its first to its last completed step (an
   all_reduce every rank of it took part in); no two spans overlap.
2. No orphans: nothing the episode started is alive once its agents are gone (see the sweep).
3. Finishes, or fails cleanly with the budget spent, before the deadline; no agent the harness did
   not end exits non-zero while the job's own failures had not spent the budget.
4. Progress: after every fault, steps go beyond the last step before it (unless the job then
   failed cleanly), and every world resumes from the newest checkpoint.
5. Budget: the restart count the last workers are started with is the number of the job's own
   faults (worker kills) before their start: one count for the job, or per node where each
   agent counts its own (torchrun, tensorplay's run).

Recovery of a fault: from its injection until every rank of the world that trains after it has
completed a step. That world is the last one to start before the next fault (the one training
when the dust settles), or the first one after if none did (``overlapped``). For a new node,
only worlds it trains in count: its fault is over when it has joined. A world that completed
no step for ``STOPPED`` s before the next fault, while a later one trained, is not it either
(torn down after training through a pause): the later one is, overlapped. A world the fault ended
(with the killed worker, or the killed or departed node) is never it, whatever its ranks
logged while the signal was on its way. A fault after which no world trains is "never",
except from the fault that spent the budget on, when the job failed cleanly (``ended_job``: no
recovery is due); the table's medians rank a "never" above every time (report.py).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FIELD = re.compile(r"(\w+)=(\S+)")
# Seconds without a completed step before the next fault after which a world had stopped (the
# job steps every 0.1 s plus its all_reduce; a loaded machine stretches that, not to 2 s).
STOPPED = 2.0


@dataclass
class World:
    id: str
    size: int
    first: float = math.inf
    last: float = -math.inf
    first_by_rank: dict[int, float] = field(default_factory=dict)
    steps_by_rank: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    resume_step: int = -1
    resume_t: float = math.inf
    nodes: set[str] = field(default_factory=set)
    joined_by_rank: dict[int, float] = field(default_factory=dict)  # RESUME: its group formed
    files: set[str] = field(default_factory=set)  # one per worker process of the world


def read_lines(folder: Path) -> list[dict[str, Any]]:
    lines = []
    for path in sorted(folder.glob("*.log")):
        for raw in path.read_text(errors="replace").splitlines():
            kind, _, rest = raw.partition(" ")
            fields: dict[str, Any] = dict(FIELD.findall(rest))
            if "t" not in fields:
                continue  # a line cut short by a kill
            try:
                fields["t"] = float(fields["t"])
                for key in ("size", "rank", "restart", "step"):
                    if key in fields:
                        fields[key] = int(fields[key])
            except ValueError:
                continue
            fields["kind"] = kind
            fields["file"] = path.name
            lines.append(fields)
    return sorted(lines, key=lambda line: line["t"])


def worlds(lines: list[dict[str, Any]]) -> dict[str, World]:
    found: dict[str, World] = {}
    for line in lines:
        if line["kind"] not in ("STEP", "RESUME") or "world" not in line:
            continue
        world = found.setdefault(line["world"], World(id=line["world"], size=line["size"]))
        world.files.add(line.get("file", ""))
        if line["kind"] == "RESUME":
            world.joined_by_rank.setdefault(line["rank"], line["t"])
            if line["rank"] == 0:
                world.resume_step, world.resume_t = line["step"], line["t"]
            continue
        t, rank = line["t"], line["rank"]
        world.first, world.last = min(world.first, t), max(world.last, t)
        world.first_by_rank.setdefault(rank, t)
        world.nodes.add(line.get("node", "?"))
        world.steps_by_rank[rank].append(t)
    return found


def split_brain(found: dict[str, World]) -> list[tuple[str, str]]:
    spans = sorted((w for w in found.values() if w.first_by_rank), key=lambda w: w.first)
    return [
        (a.id, b.id)
        for i, a in enumerate(spans)
        for b in spans[i + 1 :]
        if b.first < a.last  # b trained before a's last step
    ]


def ready_after(world: World, t: float) -> float | None:
    """When every rank of ``world`` had completed a step after ``t``."""
    if len(world.steps_by_rank) < world.size:
        return None
    times = []
    for steps in world.steps_by_rank.values():
        later = [s for s in steps if s > t]
        if not later:
            return None
        times.append(later[0])
    return max(times)


def settled_world(
    found: dict[str, World], t: float, t_next: float, joining: str = "", lost: str = ""
) -> tuple[World | None, bool]:
    """The world that trains once a fault at ``t`` settles, and whether it is ``overlapped``
    (first ready after the next fault at ``t_next``). ``joining``: a new node, whose fault is
    over once a world with its ranks trains. ``lost``: a node (``n2``) or a worker's line file
    (``n2_pid7.log``) the fault ended; a world with it is over, however many steps its ranks
    still logged while the signal was on its way."""

    def could(world: World) -> bool:
        if joining and joining not in world.nodes:
            return False
        return not lost or (lost not in world.nodes and lost not in world.files)

    after = sorted((w for w in found.values() if w.last > t and could(w)), key=lambda w: w.first)
    settled = [w for w in after if w.first < t_next and ready_after(w, t) is not None]
    if settled:
        world = settled[-1]
        # A world that had stopped well before the next fault while the job trained again
        # only in a later one did not settle the fault (a world torn down after training
        # through a pause): the later one, overlapped, is what trained once the dust settled.
        later = [w for w in after if w.first > world.last and ready_after(w, t) is not None]
        if world.last < t_next - STOPPED and later:
            return later[0], True
        ready = ready_after(world, t)
        assert ready is not None
        return world, ready > t_next
    for world in after:
        if ready_after(world, t) is not None:
            return world, True
    return None, False


def ended_by(fault: dict[str, Any]) -> str:
    """What a fault ends for good (see :func:`settled_world`'s ``lost``): a killed worker's
    line file, a killed or departed node; "" for faults that end nothing by themselves."""
    if fault["fault"] == "kill-worker" and "pid" in fault:
        return f"{fault['node']}_pid{fault['pid']}.log"
    if fault["fault"] in ("kill-node", "term-agent"):
        return str(fault["node"])
    return ""


def recovery(
    found: dict[str, World], t: float, t_next: float, joining: str = "", lost: str = ""
) -> tuple[float | None, bool]:
    """Seconds from the fault at ``t`` to every rank of its settled world stepping."""
    world, overlapped = settled_world(found, t, t_next, joining, lost)
    ready = None if world is None else ready_after(world, t)
    return (None, False) if ready is None else (ready - t, overlapped)


def judge(
    *,
    lines: list[dict[str, Any]],
    injected: list[dict[str, Any]],
    nodes: list[dict[str, Any]],
    hung: list[str],
    orphans: list[dict[str, Any]],
    warm: bool,
    max_restarts: int,
    budget_scope: str,
    own: frozenset[str],
) -> dict[str, Any]:
    done = [line for line in lines if line["kind"] == "DONE"]
    faults = [f for f in injected if "t" in f]
    own_faults = [f for f in faults if f["fault"] in own]
    spent = len(own_faults) > max_restarts
    found = worlds(lines)

    # 3. the outcome, and who gave up with budget left
    if not warm:
        outcome = "no-start"
    elif hung:
        outcome = "hung"
    elif done:
        outcome = "finished"
    elif spent and not orphans:
        outcome = "failed-clean"
    else:
        outcome = "failed"
    gave_up = [
        n["name"]
        for n in nodes
        if not n["signalled"]
        and n["code"] not in (0, None)
        and n["name"] not in hung
        and len([f for f in own_faults if f["t"] < n["exited"]]) <= max_restarts
    ]

    # 1. one world at a time
    overlaps = split_brain(found)

    # 4. progress
    steps = [(line["t"], line["step"]) for line in lines if line["kind"] == "STEP"]
    stalled = []
    end = max((w.first for w in found.values() if w.first_by_rank), default=-math.inf)
    for fault in faults:
        before = max((s for t, s in steps if t < fault["t"]), default=0)
        if any(t > fault["t"] and s > before for t, s in steps):
            continue
        if outcome == "failed-clean" and fault["t"] >= end:
            continue  # the job ended on its own failures: nothing to advance
        stalled.append(fault["fault"])
    ckpts = [(line["t"], line["step"]) for line in lines if line["kind"] == "CKPT"]
    bad_resume = []
    for world in found.values():
        if world.resume_step < 0:
            continue
        newest = max((s for t, s in ckpts if t < world.resume_t), default=0)
        if world.resume_step < newest:
            bad_resume.append({"world": world.id, "resumed": world.resume_step, "newest": newest})

    # 5. budget
    starts = [line for line in lines if line["kind"] == "START"]
    scopes = sorted({n["name"] for n in nodes}) if budget_scope == "node" else ["job"]
    budget = []
    for scope in scopes:
        mine = [s for s in starts if budget_scope == "job" or s["node"] == scope]
        if not mine:
            continue
        last = max(s["t"] for s in mine)
        # The count the last workers started with: a peer's loss refunds units it caused, so a
        # transient attempt's higher count is not what the job was charged.
        charged = max(mine, key=lambda s: s["t"])["restart"]
        expected = len(
            [
                f
                for f in own_faults
                if f["t"] < last and (budget_scope == "job" or f["node"] == scope)
            ]
        )
        budget.append({"scope": scope, "charged": charged, "own": expected})
    budget_ok = all(b["charged"] == b["own"] for b in budget)

    # recovery per fault; from the job's own fault that spent the budget on, none is due
    spending = own_faults[max_restarts]["t"] if outcome == "failed-clean" else math.inf
    recoveries = []
    for i, fault in enumerate(faults):
        t_next = faults[i + 1]["t"] if i + 1 < len(faults) else math.inf
        joining = fault["node"] if fault["fault"] == "new-node" else ""
        took, overlapped = recovery(found, fault["t"], t_next, joining, ended_by(fault))
        recoveries.append(
            {
                "fault": fault["fault"],
                "recovery": None if took is None else round(took, 3),
                "overlapped": overlapped,
                "ended_job": took is None and fault["t"] >= spending,
            }
        )

    checks = {
        "one_world": not overlaps,
        "no_orphans": not orphans,
        "ends_well": outcome in ("finished", "failed-clean") and not gave_up,
        "progress": not stalled and not bad_resume,
        "budget": budget_ok,
    }
    return {
        "outcome": outcome,
        "checks": checks,
        "passed": all(checks.values()),
        "gave_up_with_budget_left": gave_up,
        "split_brain": overlaps,
        "orphans": orphans,
        "hung_nodes": hung,
        "stalled_after": stalled,
        "bad_resume": bad_resume,
        "budget": budget,
        "recoveries": recoveries,
        "worlds": len([w for w in found.values() if w.first_by_rank]),
        "last_step": max((s for _, s in steps), default=0),
        "own_faults": len(own_faults),
        "nodes": [
            {"name": n["name"], "code": n["code"], "signalled": n["signalled"]} for n in nodes
        ],
    }
