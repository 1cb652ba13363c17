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
    """'last / first': seconds from the last (first) join call until every agent has its round."""
    if result is None:
        return "-"
    if result["status"] != "ok":
        return str(result["status"])
    last = _fmt(result.get("last_join_call_to_all_done_s"), 2)
    return f"{last} / {_fmt(result.get('first_call_to_all_done_s'), 2)}"


def _ratio(anchor: Result | None, ours: Result | None) -> str:
    """Anchor time over ours, for both clocks ('last / first')."""
    if not anchor or not ours or anchor["status"] != "ok" or ours["status"] != "ok":
        return "-"
    parts = []
    for key in ("last_join_call_to_all_done_s", "first_call_to_all_done_s"):
        mine, theirs = ours.get(key) or 0.0, anchor.get(key) or 0.0
        parts.append(f"{theirs / mine:.1f}x" if mine > 0 else "-")
    return " / ".join(parts)


def format_table(results: list[Result]) -> str:
    """Convergence by size (seconds from the last join call; ratio = anchor / ours), then ops and
    re-rendezvous scenarios."""
    conv = {(r["impl"], r["size"]): r for r in results if r["scenario"] == "none"}
    sizes = sorted({size for _, size in conv})
    lines = [
        "convergence: seconds from the last / first join call until every agent has its round",
        f"{'N':>5} | {'ours':>11} | {'ours-tpstore':>12} | {'ours-mem':>11} | "
        f"{'tensorplay':>11} | {'ratio':>11} | "
        f"{'torch':>11} | {'ratio':>11} | ops/agent ours (follower max, closer) | tp ops med | "
        "torch ops med",
    ]
    for n in sizes:
        ours, old, mem, tp, torch = (
            conv.get((impl, n))
            for impl in ("ours", "ours-tpstore", "ours-memory", "tensorplay", "torch")
        )
        counted = ours if ours and ours["status"] == "ok" else mem
        ours_ops = (
            f"{_fmt(counted.get('ops_follower_max'))}, {_fmt(counted.get('ops_closer'))}"
            if counted
            else "-"
        )
        lines.append(
            f"{n:>5} | {_time(ours):>11} | {_time(old):>12} | {_time(mem):>11} | "
            f"{_time(tp):>11} | "
            f"{_ratio(tp, ours):>11} | "
            f"{_time(torch):>11} | {_ratio(torch, ours):>11} | {ours_ops:>37} | "
            f"{_fmt((tp or {}).get('ops_per_agent_median')):>10} | "
            f"{_fmt((torch or {}).get('ops_per_agent_median')):>13}"
        )
    scen = [r for r in results if r["scenario"] != "none"]
    if scen:
        lines += [
            "",
            "re-rendezvous: seconds from the event until every survivor has its new round",
            f"{'impl':>12} | {'scenario':>8} | {'N':>5} | {'status':>8} | {'all':>7} | "
            f"{'median':>7} | new world | rejoin ops (follower max, closer) | watch ops/agent",
        ]
        for r in scen:
            lines.append(
                f"{r['impl']:>12} | {r['scenario']:>8} | {r['size']:>5} | {r['status']:>8} | "
                f"{_fmt(r.get('event_to_all_rejoined_s')):>7} | "
                f"{_fmt(r.get('event_to_median_rejoined_s')):>7} | "
                f"{_fmt(r.get('new_world_sizes')):>9} | "
                f"{_fmt(r.get('rejoin_ops_follower_max'))}, {_fmt(r.get('rejoin_ops_closer'))}"
                f" | {_fmt(r.get('watch_ops_per_agent_median'))}"
            )
    return "\n".join(lines)


def write_plot(results: list[Result], path: Path) -> None:
    """Log-log plots against N: convergence time (solid: from the last join call, dotted: from the
    first) and store operations per agent (ours: follower and closer; anchors: median and max).
    Sizes that failed are marked with a grey line and their status."""
    import matplotlib

    matplotlib.use("Agg")  # no display here
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6))
    impls = (
        ("ours", "o"),
        ("ours-tpstore", "D"),
        ("ours-memory", "x"),
        ("tensorplay", "s"),
        ("torch", "^"),
    )
    for impl, marker in impls:
        rows = sorted(
            (r for r in results if r["impl"] == impl and r["scenario"] == "none"),
            key=lambda r: r["size"],
        )
        done = [r for r in rows if r["status"] == "ok"]
        if done:
            xs = [r["size"] for r in done]
            line = left.plot(
                xs, [r["last_join_call_to_all_done_s"] for r in done], marker=marker, label=impl
            )[0]
            left.plot(
                xs, [r["first_call_to_all_done_s"] for r in done], ":", color=line.get_color()
            )
            _plot_ops(right, impl, marker, done, line.get_color())
        for r in rows:
            if r["status"] not in ("ok", "skipped"):
                left.axvline(r["size"], linestyle=":", color="grey")
                left.annotate(
                    f"{impl}: {r['status'][:20]}", (r["size"], 0.02), rotation=90, fontsize=7
                )
    left.set(xscale="log", yscale="log", xlabel="agents N", ylabel="seconds until all have a round")
    left.set_title("convergence, min = max = N (dotted: from first call)")
    right.set(xscale="log", yscale="log", xlabel="agents N", ylabel="store operations per agent")
    right.set_title("store operations per agent per round")
    for axis in (left, right):
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_ops(axis: Any, impl: str, marker: str, done: list[Result], color: str) -> None:
    # Ours: a follower's and the closer's operations; anchors: the median and worst agent.
    if impl.startswith("ours"):
        series = (("ops_follower_max", "-", "follower"), ("ops_closer", "--", "closer"))
    else:
        series = (("ops_per_agent_median", "-", "median"), ("ops_per_agent_max", "--", "max"))
    xs = [r["size"] for r in done]
    for key, style, what in series:
        ys = [r[key] for r in done]
        axis.plot(xs, ys, style, marker=marker, color=color, label=f"{impl} {what}")
