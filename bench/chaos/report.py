"""The table per launcher: outcomes, checks and recovery per fault kind over its episodes.

A recovery's median and p90 rank a fault never recovered from above every time, so a launcher
that rarely recovers is not given the median of its few recoveries; ``median_recovered`` in
the JSON is the median of the recovered ones alone.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from chaos.schedule import KINDS

COLUMNS = (
    ("episodes", "episodes"),
    ("finished", "finished"),
    ("failed-clean", "failed clean"),
    ("failed", "failed (not clean)"),
    ("hung", "hung"),
    ("no-start", "did not start"),
    ("split_brain", "split brain"),
    ("orphans", "with orphans"),
    ("gave_up", "gave up with budget left"),
    ("stalled", "no progress after a fault"),
    ("budget", "budget off (collateral charged)"),
    ("passed", "all five checks pass"),
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    low, high = int(k), min(int(k) + 1, len(ordered) - 1)
    if k == low or ordered[high] == ordered[low]:  # inf * 0 and inf - inf are nan
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def _seconds(value: float) -> float | str:
    return "never" if math.isinf(value) else round(value, 2)


def _shown(value: float | str) -> str:
    return str(value) if value == "never" else f"{value} s"


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"episodes": len(results)}
    for outcome in ("finished", "failed-clean", "failed", "hung", "no-start"):
        out[outcome] = sum(r["outcome"] == outcome for r in results)
    out["split_brain"] = sum(bool(r["split_brain"]) for r in results)
    out["orphans"] = sum(bool(r["orphans"]) for r in results)
    out["gave_up"] = sum(bool(r["gave_up_with_budget_left"]) for r in results)
    out["stalled"] = sum(not r["checks"]["progress"] for r in results)
    out["budget"] = sum(not r["checks"]["budget"] for r in results)
    out["passed"] = sum(r["passed"] for r in results)
    recovery: dict[str, Any] = {}
    for kind in (*KINDS, "all"):
        due = [
            x
            for r in results
            for x in r["recoveries"]
            if (kind == "all" or x["fault"] == kind) and not x.get("ended_job", False)
        ]
        times = [x["recovery"] for x in due if x["recovery"] is not None]
        missing = len(due) - len(times)
        # A fault never recovered from ranks above every time: leaving it out would give a
        # launcher that rarely recovers the median of its few recoveries.
        ranked = [*times, *[math.inf] * missing]
        recovery[kind] = {
            "n": len(times),
            "not_recovered": missing,
            "median": _seconds(statistics.median(ranked)) if ranked else None,
            "p90": _seconds(percentile(ranked, 0.9)) if ranked else None,
            "median_recovered": round(statistics.median(times), 2) if times else None,
        }
    out["recovery"] = recovery
    return out


def table(summaries: dict[str, dict[str, Any]]) -> str:
    names = list(summaries)
    rows = ["| " + " | ".join(["", *names]) + " |", "|" + "---|" * (len(names) + 1)]
    for key, label in COLUMNS:
        rows.append("| " + " | ".join([label, *(str(summaries[n][key]) for n in names)]) + " |")
    for kind in (*KINDS, "all"):
        cells = []
        for n in names:
            r = summaries[n]["recovery"][kind]
            if r["n"] == 0 and r["not_recovered"] == 0:
                cells.append("-")
                continue
            text = f"{_shown(r['median'])} / {_shown(r['p90'])} (n={r['n']})"
            if r["not_recovered"]:
                text += f", {r['not_recovered']} never"
            cells.append(text)
        rows.append("| " + " | ".join([f"recovery {kind}: median / p90", *cells]) + " |")
    return "\n".join(rows)
