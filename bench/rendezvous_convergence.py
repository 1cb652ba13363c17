"""Rendezvous convergence benchmark: ours (``run_join``) against tensorplay's and torch's c10d.

N agents (threads in a few processes, one store client each) join one round over one TCPStore
served by its own process, min = max = N. ``ours`` uses our TCPStore server and client (the
default ``store_type=tcp``), ``ours-tpstore`` tensorplay's (``store_type=tensorplay``). For
each size we measure the time from the last agent's join call until every agent has its round,
and the store operations per agent. Optionally
(``--scenarios``) we measure ours re-forming the world after one node leaves gracefully, dies
without a goodbye (SIGKILL), or joins late. Every implementation and size runs in its own
processes, bounded by ``--timeout``; results go to JSON and a PNG plot. Example::

    python bench/rendezvous_convergence.py --sizes 2,8,32,128 --impl ours,tensorplay,torch

See docs/benchmarks.md for the method and the results on our machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_trial import TrialSpec, run_trial, time_wait_sockets

IMPLS = ("ours", "ours-tpstore", "ours-memory", "tensorplay", "torch")
SCENARIOS = ("leave", "crash", "late")


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        message = f"sizes must be integers separated by commas: {text!r}"
        raise argparse.ArgumentTypeError(message) from None
    if not sizes or min(sizes) < 2:
        raise argparse.ArgumentTypeError(f"every size must be >= 2: {text!r}")
    return sizes


def _names(allowed: Sequence[str]):  # type: ignore[no-untyped-def]
    def parse(text: str) -> list[str]:
        names = [part.strip() for part in text.split(",") if part.strip()]
        unknown = [n for n in names if n not in allowed]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {list(allowed)}")
        return names

    return parse


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=_sizes, default=[2, 8, 32, 128])
    parser.add_argument("--impl", type=_names(IMPLS), default=list(IMPLS))
    parser.add_argument("--timeout", type=float, default=120.0, help="per trial, seconds")
    parser.add_argument("--anchor-max", type=int, default=512, help="largest N for anchors")
    parser.add_argument("--scenarios", type=_names(SCENARIOS), default=[])
    parser.add_argument("--scenario-sizes", type=_sizes, default=[64, 256])
    parser.add_argument("--per-process", type=int, default=256, help="agent threads per process")
    parser.add_argument("--scenario-heartbeat", type=float, default=0.5, help="interval, s")
    parser.add_argument("--scenario-expiry", type=float, default=2.0, help="heartbeat timeout")
    parser.add_argument("--scenario-last-call", type=float, default=0.1)
    parser.add_argument(
        "--watch-interval",
        type=float,
        default=0.0,
        help="seconds between a member's looks (0: the agent's look period for the heartbeat)",
    )
    parser.add_argument(
        "--watch-poll",
        action="store_true",
        help="members only look, sleeping in between, instead of holding a store wait",
    )
    parser.add_argument(
        "--switch-interval",
        type=float,
        default=0.005,
        help="sys.setswitchinterval in agent hosts (Python's default 0.005)",
    )
    parser.add_argument(
        "--settle-below",
        type=int,
        default=5000,
        help="before each trial, wait (at most --settle-max s) until the host has fewer TCP "
        "sockets in TIME_WAIT than this: earlier trials and other programs share the port budget",
    )
    parser.add_argument("--settle-max", type=float, default=65.0)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        metavar="RESULTS_JSON",
        help="run nothing: merge these results.json files, print the table, write the plot",
    )
    parser.add_argument(
        "--keep-going", action="store_true", help="run larger N after an impl failed"
    )
    return parser.parse_args(argv)


def plan(args: argparse.Namespace) -> list[TrialSpec]:
    """Convergence trials for every impl and size, then ours' re-rendezvous scenarios."""
    specs = [
        TrialSpec(
            impl=impl,
            size=n,
            timeout=args.timeout,
            per_process=args.per_process,
            switch_interval=args.switch_interval,
        )
        for impl in args.impl
        for n in args.sizes
        if impl.startswith("ours") or n <= args.anchor_max
    ]
    for ours in ("ours", "ours-tpstore"):
        if ours not in args.impl:
            continue
        specs += [
            TrialSpec(
                impl=ours,
                size=n,
                scenario=scenario,
                timeout=args.timeout,
                per_process=args.per_process,
                heartbeat_interval=args.scenario_heartbeat,
                heartbeat_timeout=args.scenario_expiry,
                last_call=args.scenario_last_call,
                watch_interval=args.watch_interval,
                watch_poll=args.watch_poll,
                switch_interval=args.switch_interval,
            )
            for scenario in args.scenarios
            for n in args.scenario_sizes
        ]
    return specs


def run(args: argparse.Namespace) -> dict[str, Any]:
    args.out.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    failed: set[tuple[str, str]] = set()
    with open(args.out / "trials.log", "a") as log:
        for spec in plan(args):
            if (spec.impl, spec.scenario) in failed:
                # A larger N of an implementation that already failed would only fail slower.
                results.append(_skipped(spec))
                continue
            print(f"... {spec.impl} N={spec.size} {spec.scenario}", file=sys.stderr, flush=True)
            log.write(f"=== {time.strftime('%H:%M:%S')} {spec}\n")
            log.flush()
            settled = settle(args.settle_below, args.settle_max)
            summary = run_trial(spec, log)
            summary["settle_wait_s"] = settled
            results.append(summary)
            print(f"    {summary['status']}", file=sys.stderr, flush=True)
            if summary["status"] != "ok" and not args.keep_going:
                failed.add((spec.impl, spec.scenario))
    return {"machine": machine(), "args": _jsonable(vars(args)), "results": results}


def settle(below: int, at_most: float) -> float:
    """Wait until fewer than ``below`` sockets are in TIME_WAIT (or ``at_most`` seconds pass).

    TIME_WAIT lasts 60 s and every TCPStore call leaves one, so a trial right after a big one
    would otherwise inherit its port debt. Returns how long it waited.
    """
    start = time.monotonic()
    while time.monotonic() - start < at_most and time_wait_sockets() >= below:
        time.sleep(1.0)
    return time.monotonic() - start


def _skipped(spec: TrialSpec) -> dict[str, Any]:
    return {"impl": spec.impl, "size": spec.size, "scenario": spec.scenario, "status": "skipped"}


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in values.items()}


def machine() -> dict[str, Any]:
    """What the numbers were measured on, including the sysctls that bound the port budget."""
    import os

    def read(path: str) -> str:
        try:
            return Path(path).read_text().strip()
        except OSError:
            return "?"

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "tcp_tw_reuse": read("/proc/sys/net/ipv4/tcp_tw_reuse"),
        "ip_local_port_range": " ".join(read("/proc/sys/net/ipv4/ip_local_port_range").split()),
        "somaxconn": read("/proc/sys/net/core/somaxconn"),
    }


def merged(paths: Sequence[Path]) -> dict[str, Any]:
    """The results of several earlier runs as one report (the machine of the first)."""
    reports = []
    for path in paths:
        try:
            reports.append(json.loads(path.read_text()))
        except (OSError, ValueError) as error:
            raise SystemExit(f"cannot read results {path}: {error}") from None
    results = [r for report in reports for r in report.get("results", [])]
    return {
        "machine": reports[0].get("machine", {}),
        "merged_from": [str(p) for p in paths],
        "results": results,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from bench_report import format_table, write_plot

    if args.merge:
        report = merged(args.merge)
        print(format_table(report["results"]))
        args.out.mkdir(parents=True, exist_ok=True)
        write_plot(report["results"], args.out / "rendezvous_convergence.png")
        return 0
    report = run(args)

    (args.out / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    print(format_table(report["results"]))
    if not args.no_plot:
        write_plot(report["results"], args.out / "rendezvous_convergence.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
