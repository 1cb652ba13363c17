"""The benchmark's outputs: a plain-text table (with ratios to ours) and a PNG plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

Result = dict[str, Any]


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _time(result: Result | None) -> str:
    if result is None:
        return "-"
    if result["status"] != "ok":
        return str(result["status"])
    return _fmt(result.get("last_join_call_to_all_done_s"))


def _ratio(anchor: Result | None, ours: Result | None) -> str:
    if not anchor or not ours or anchor["status"] != "ok" or ours["status"] != "ok":
        return "-"
    mine = ours.get("last_join_call_to_all_done_s") or 0.0
    theirs = anchor.get("last_join_call_to_all_done_s") or 0.0
    return f"{theirs / mine:.1f}x" if mine > 0 else "-"


def format_table(results: list[Result]) -> str:
    """Convergence by size (seconds from the last join call; ratio = anchor / ours), then ops and
    re-rendezvous scenarios."""
    conv = {(r["impl"], r["size"]): r for r in results if r["scenario"] == "none"}
    sizes = sorted({size for _, size in conv})
    lines = [
        "convergence: seconds from the last join call until every agent has its round",
        f"{'N':>5} | {'ours':>9} | {'ours-mem':>9} | {'tensorplay':>12} | {'ratio':>7} | "
        f"{'torch':>12} | {'ratio':>7} | ops/agent ours (follower max, closer) | tp ops med | "
        "torch ops med",
    ]
    for n in sizes:
        ours, mem, tp, torch = (
            conv.get((impl, n)) for impl in ("ours", "ours-memory", "tensorplay", "torch")
        )
        counted = ours or mem
        ours_ops = (
            f"{_fmt(counted.get('ops_follower_max'))}, {_fmt(counted.get('ops_closer'))}"
            if counted
            else "-"
        )
        lines.append(
            f"{n:>5} | {_time(ours):>9} | {_time(mem):>9} | {_time(tp):>12} | "
            f"{_ratio(tp, ours):>7} | "
            f"{_time(torch):>12} | {_ratio(torch, ours):>7} | {ours_ops:>37} | "
            f"{_fmt((tp or {}).get('ops_per_agent_median')):>10} | "
            f"{_fmt((torch or {}).get('ops_per_agent_median')):>13}"
        )
    scen = [r for r in results if r["scenario"] != "none"]
    if scen:
        lines += [
            "",
            "re-rendezvous (ours): seconds from the event until every survivor has its new round",
            f"{'scenario':>8} | {'N':>5} | {'status':>8} | {'all':>7} | {'median':>7} | "
            "new world | rejoin ops (follower max, closer) | watch ops/agent",
        ]
        for r in scen:
            lines.append(
                f"{r['scenario']:>8} | {r['size']:>5} | {r['status']:>8} | "
                f"{_fmt(r.get('event_to_all_rejoined_s')):>7} | "
                f"{_fmt(r.get('event_to_median_rejoined_s')):>7} | "
                f"{_fmt(r.get('new_world_sizes')):>9} | "
                f"{_fmt(r.get('rejoin_ops_follower_max'))}, {_fmt(r.get('rejoin_ops_closer'))}"
                f" | {_fmt(r.get('watch_ops_per_agent_median'))}"
            )
    return "\n".join(lines)


def write_plot(results: list[Result], path: Path) -> None:
    """Log-log plot of convergence time against N per implementation; failures are marked."""
    import matplotlib

    matplotlib.use("Agg")  # no display here
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    impls = (("ours", "o"), ("ours-memory", "x"), ("tensorplay", "s"), ("torch", "^"))
    for impl, marker in impls:
        rows = sorted(
            (r for r in results if r["impl"] == impl and r["scenario"] == "none"),
            key=lambda r: r["size"],
        )
        done = [r for r in rows if r["status"] == "ok"]
        if done:
            xs = [r["size"] for r in done]
            left.plot(
                xs, [r["last_join_call_to_all_done_s"] for r in done], marker=marker, label=impl
            )
            ops = [r.get("ops_per_agent_median") for r in done]
            right.plot(xs, ops, marker=marker, label=impl)
        for r in rows:
            if r["status"] not in ("ok", "skipped"):
                left.axvline(r["size"], linestyle=":", color="grey")
                left.annotate(
                    f"{impl}: {r['status'][:20]}", (r["size"], 1.0), rotation=90, fontsize=7
                )
    left.set(xscale="log", yscale="log", xlabel="agents N", ylabel="seconds after last join call")
    left.set_title("convergence (min = max = N)")
    right.set(xscale="log", yscale="log", xlabel="agents N", ylabel="store ops per agent (median)")
    right.set_title("store operations per agent")
    for axis in (left, right):
        axis.grid(True, which="both", alpha=0.3)
        axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
