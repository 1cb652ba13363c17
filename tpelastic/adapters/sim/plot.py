"""A timeline picture of a simulated run: membership, rounds and faults (matplotlib, optional).

Top panel: how many nodes train over virtual time, with a dashed line where each round began to
train, a dotted orange line where each in-place restart (an attempt of a round) began, and a red
tick for each injected fault; labels that would crowd each other are left out (the lines stay).
Bottom panel, up to ``MAX_LANES`` nodes: one lane per node, grey while it joins, coloured by
round while it trains, with a small bar where it restarted its workers in place, ending where it
crashed, left, fenced or failed. Above ``MAX_LANES`` nodes, lanes would be thinner than a pixel:
the bottom panel then stacks how many nodes join, train and have ended over time. Both panels
have a legend. matplotlib is the ``sim`` extra: ``pip install 'tpelastic[sim]'``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from tpelastic.core.sim.cluster import SimRecord
from tpelastic.core.sim.run import SimSummary

MAX_LANES = 40
# Labels closer than this share of the time axis are left out, so they never overlap.
_LABEL_GAP = 0.035
_ENDS = {
    "node.crashed": "crashed",
    "node.left": "left",
    "node.fenced": "fenced",
    "rendezvous.join_failed": "failed",
}


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed; the message says how to get it."""


def plot_timeline(
    records: Sequence[SimRecord], summary: SimSummary, path: str | os.PathLike[str]
) -> None:
    """Draw the run to ``path`` (PNG, SVG or PDF, by its suffix).

    Raises:
        PlotUnavailable: matplotlib is missing.
        OSError / ValueError: the file cannot be written, or its suffix is not a known format.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: files only
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable("plots need matplotlib: pip install 'tpelastic[sim]'") from None
    lanes = _lanes(records, summary.virtual_seconds)
    show_lanes = 0 < len(lanes) <= MAX_LANES
    rows = 2 if lanes else 1
    height = [2.5, max(1.5, 0.25 * len(lanes)) if show_lanes else 2.5] if lanes else [2.5]
    fig, axes = plt.subplots(rows, 1, figsize=(12, sum(height) + 1.2), sharex=True, squeeze=False)
    try:
        _draw_counts(axes[0][0], records, summary)
        if show_lanes:
            _draw_lanes(axes[1][0], lanes, plt.get_cmap("tab10"))
            _draw_restarts(axes[1][0], records, sorted(lanes))
        elif lanes:
            _draw_states(axes[1][0], lanes, summary.virtual_seconds)
        axes[-1][0].set_xlabel("virtual time (s)")
        fig.suptitle(
            f"{summary.scenario} (seed {summary.seed}): {plural(len(lanes), 'node')}, "
            f"{plural(len(summary.rounds), 'round')}, "
            f"{plural(summary.restarts_used, 'restart')}, {summary.time_lost:.1f} s lost"
        )
        fig.tight_layout()
        fig.savefig(os.fspath(path))
    finally:
        plt.close(fig)


def plural(count: int, noun: str) -> str:
    """``1 round``, ``2 rounds``, ``0 restarts``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def spaced(xs: Sequence[float], span: float, gap: float = _LABEL_GAP) -> list[bool]:
    """Which of the sorted positions ``xs`` get a label: each at least ``gap * span`` after the
    last labelled one, so labels never overlap however many there are."""
    keep, last = [], float("-inf")
    for x in xs:
        ok = x - last >= gap * span
        keep.append(ok)
        if ok:
            last = x
    return keep


def _draw_counts(ax: Any, records: Sequence[SimRecord], summary: SimSummary) -> None:
    from matplotlib.lines import Line2D

    times, counts = _training_counts(records, summary.virtual_seconds)
    ax.step(times, counts, where="post", color="tab:blue")
    span = max(summary.virtual_seconds, 1e-9)
    top = max(counts) if counts else 1
    marks = [(stat.first_at, f"r{stat.round_no}", "grey") for stat in summary.rounds]
    marks += [
        (each.first_at, f"r{each.round_no}.{each.attempt}", "tab:orange")
        for each in summary.attempts
    ]
    marks.sort()
    for (x, label, colour), show in zip(marks, spaced([m[0] for m in marks], span), strict=True):
        style = "--" if colour == "grey" else ":"
        ax.axvline(x, color=colour, linestyle=style, linewidth=0.8)
        if show:
            ax.annotate(
                label, (x, top), xytext=(2, 2), textcoords="offset points",
                fontsize=7, color=colour, rotation=90, va="bottom",
            )  # fmt: skip
    faults = [rec.t for rec in records if rec.name == "sim.fault"]
    for t in faults:
        ax.axvline(t, color="tab:red", linewidth=0.8, alpha=0.6)
    ax.set_ylabel("nodes training")
    ax.set_ylim(0, top * 1.35 + 1)  # room above the curve for the labels
    handles = [Line2D([], [], color="tab:blue", label="nodes training")]
    handles.append(Line2D([], [], color="grey", linestyle="--", label="round starts (rN)"))
    if summary.attempts:
        label = "in-place restart (rN.A)"
        handles.append(Line2D([], [], color="tab:orange", linestyle=":", label=label))
    if faults:
        handles.append(Line2D([], [], color="tab:red", alpha=0.6, label="injected fault"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)


def _training_counts(records: Sequence[SimRecord], end: float) -> tuple[list[float], list[int]]:
    """Number of training nodes after each record (from the per-node records)."""
    training: set[str] = set()
    times, counts = [0.0], [0]
    for rec in records:
        if rec.name == "rendezvous.joined":
            training.add(rec.node)
        elif rec.name in _ENDS or rec.name == "rendezvous.join_started":
            training.discard(rec.node)
        else:
            continue
        times.append(rec.t)
        counts.append(len(training))
    times.append(end)
    counts.append(len(training))
    return times, counts


# One lane: (start, end, state, round) segments, plus how it ended.
Lane = list[tuple[float, float, str, int]]


def _lanes(records: Sequence[SimRecord], end: float) -> dict[str, Lane]:
    lanes: dict[str, Lane] = {}
    current: dict[str, tuple[float, str, int]] = {}
    for rec in records:
        if not rec.node or rec.name == "sim.fault":
            continue
        state = _state_after(rec)
        if state is None:
            continue
        lane = lanes.setdefault(rec.node, [])
        if rec.node in current:
            since, old, round_no = current.pop(rec.node)
            lane.append((since, rec.t, old, round_no))
        if state[0] not in ("crashed", "left", "fenced", "failed"):
            current[rec.node] = (rec.t, state[0], state[1])
        else:
            lane.append((rec.t, rec.t, state[0], -1))
    for node, (since, last, round_no) in current.items():
        lanes[node].append((since, end, last, round_no))
    return lanes


def _state_after(rec: SimRecord) -> tuple[str, int] | None:
    if rec.name in ("node.started", "rendezvous.join_started"):
        return ("joining", -1)
    if rec.name == "rendezvous.joined":
        return ("training", int(dict(rec.fields).get("round", 0)))  # type: ignore[call-overload]
    if rec.name in _ENDS:
        return (_ENDS[rec.name], -1)
    return None


def _draw_restarts(ax: Any, records: Sequence[SimRecord], names: list[str]) -> None:
    """A short black bar on a node's lane where it restarted its workers in place."""
    rows = {name: y for y, name in enumerate(names)}
    xs = [rec.t for rec in records if rec.name == "node.restarted" and rec.node in rows]
    ys = [rows[rec.node] for rec in records if rec.name == "node.restarted" and rec.node in rows]
    if xs:
        ax.plot(xs, ys, marker="|", markersize=9, color="black", linestyle="none")


def _draw_lanes(ax: Any, lanes: dict[str, Lane], cmap: Any) -> None:
    names = sorted(lanes)
    marks = {"crashed": "X", "left": ">", "fenced": "s", "failed": "x"}
    for y, name in enumerate(names):
        for start, stop, state, round_no in lanes[name]:
            if state == "joining":
                ax.plot([start, stop], [y, y], color="lightgrey", linewidth=5)
            elif state == "training":
                ax.plot([start, stop], [y, y], color=cmap(round_no % 10), linewidth=5)
            else:
                ax.plot([start], [y], marker=marks[state], color="black", linestyle="none")
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names, fontsize=7)
    ax.set_ylabel("node (colour = round)")
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], color="lightgrey", linewidth=5, label="joining"),
        Line2D([], [], color=cmap(0), linewidth=5, label="training (colour = round)"),
        Line2D([], [], marker="|", markersize=9, color="black", linestyle="none",
               label="restarted in place"),
    ]  # fmt: skip
    labels = {"crashed": "crashed", "left": "left", "fenced": "fenced", "failed": "join failed"}
    seen = {state for lane in lanes.values() for _s, _e, state, _r in lane}
    for state, mark in marks.items():
        if state in seen:
            handles.append(
                Line2D([], [], marker=mark, color="black", linestyle="none", label=labels[state])
            )
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)


def state_counts(lanes: dict[str, Lane], end: float) -> tuple[list[float], dict[str, list[int]]]:
    """How many nodes join, train and have ended, after each change (for large runs)."""
    changes: list[tuple[float, str, int]] = []
    for lane in lanes.values():
        for start, stop, state, _round in lane:
            if state in ("joining", "training"):
                changes.append((start, state, 1))
                if stop < end:  # a node still in that state at the end stays counted
                    changes.append((stop, state, -1))
            else:
                changes.append((start, "ended", 1))
    changes.sort(key=lambda c: (c[0], c[2]))
    now = {"joining": 0, "training": 0, "ended": 0}
    times, counts = [0.0], {k: [0] for k in now}
    for t, state, delta in changes:
        now[state] += delta
        times.append(t)
        for key, value in now.items():
            counts[key].append(value)
    times.append(end)
    for key, value in now.items():
        counts[key].append(value)
    return times, counts


def _draw_states(ax: Any, lanes: dict[str, Lane], end: float) -> None:
    times, counts = state_counts(lanes, end)
    colours = {"training": "tab:blue", "joining": "lightgrey", "ended": "dimgrey"}
    ax.stackplot(
        times, *(counts[k] for k in colours), colors=list(colours.values()),
        labels=[f"{k}" for k in colours], step="post",
    )  # fmt: skip
    ax.set_ylabel(f"nodes ({len(lanes)}) by state")
    ax.set_ylim(0, len(lanes) * 1.05)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
