"""A timeline picture of a simulated run: membership, rounds and faults (matplotlib, optional).

Top panel: how many nodes train over virtual time, with a dashed line where each round began to
train, a dotted orange line where each in-place restart (an attempt of a round) began, and a red
tick for each injected fault. Bottom panel (up to ``MAX_LANES`` nodes): one lane per node, grey
while it joins, coloured by round while it trains, with a small bar where it restarted its workers
in place, ending where it crashed, left, fenced or failed. matplotlib is the ``sim`` extra:
``pip install 'tpelastic[sim]'``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from tpelastic.core.sim.cluster import SimRecord
from tpelastic.core.sim.run import SimSummary

MAX_LANES = 40
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
    rows = 2 if show_lanes else 1
    height = [2.0, max(1.5, 0.25 * len(lanes))] if show_lanes else [2.5]
    fig, axes = plt.subplots(rows, 1, figsize=(11, sum(height) + 1), sharex=True, squeeze=False)
    try:
        _draw_counts(axes[0][0], records, summary)
        if show_lanes:
            _draw_lanes(axes[1][0], lanes, plt.get_cmap("tab10"))
            _draw_restarts(axes[1][0], records, sorted(lanes))
        axes[-1][0].set_xlabel("virtual time (s)")
        fig.suptitle(
            f"{summary.scenario} (seed {summary.seed}): {len(summary.rounds)} rounds, "
            f"{summary.restarts_used} restarts, {summary.time_lost:.1f}s lost"
        )
        fig.tight_layout()
        fig.savefig(os.fspath(path))
    finally:
        plt.close(fig)


def _draw_counts(ax: Any, records: Sequence[SimRecord], summary: SimSummary) -> None:
    times, counts = _training_counts(records, summary.virtual_seconds)
    ax.step(times, counts, where="post", color="tab:blue", label="nodes training")
    for stat in summary.rounds:
        ax.axvline(stat.first_at, color="grey", linestyle="--", linewidth=0.7)
        ax.annotate(f"r{stat.round_no}", (stat.first_at, 0), fontsize=7, color="grey")
    for each in summary.attempts:
        ax.axvline(each.first_at, color="tab:orange", linestyle=":", linewidth=0.9)
        label = f"r{each.round_no}.{each.attempt}"
        ax.annotate(label, (each.first_at, 0), fontsize=6, color="tab:orange")
    for rec in records:
        if rec.name == "sim.fault":
            ax.axvline(rec.t, color="tab:red", linewidth=0.8, alpha=0.6)
    ax.set_ylabel("training")
    ax.set_ylim(bottom=0)


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
