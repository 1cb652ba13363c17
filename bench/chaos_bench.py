"""Fault injection side by side: tpelastic run, torchrun and tensorplay's run, same schedules.

For each seed, one episode per launcher (round-robin, so a change of load hits all alike): three
agents on 127.0.0.1 train a small gloo job under ``--nnodes=1:3 --nproc-per-node=2``, c10d,
``--max-restarts=3``, while a seeded schedule kills workers and nodes, stops agents (the store's
host too) for 2-6 s, sends SIGTERM and starts new nodes. Five checks per episode and the recovery
time per fault kind; see docs/benchmarks-chaos.md.

    python bench/chaos_bench.py --episodes 20 --duration 40
    python bench/chaos_bench.py --launchers tpelastic --episodes 2 --duration 12 \\
        --kinds kill-worker,new-node --out /tmp/chaos

Writes ``results.json`` (every episode in full), ``table.md`` and one folder per episode (agent
logs, worker lines) under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos import report, timeline
from chaos.episode import LAUNCHERS, PY, RDZV_CONF, Episode, Launcher, Settings
from chaos.schedule import KINDS, plan

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "chaos"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launchers", default=",".join(LAUNCHERS))
    parser.add_argument("--episodes", type=int, default=20, help="seeds per launcher")
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--seeds", default="", help="these seeds (N,M,...) instead of a range")
    parser.add_argument("--duration", type=float, default=60.0, help="s of faults per episode")
    parser.add_argument("--kinds", default=",".join(KINDS), help="fault kinds to draw from")
    parser.add_argument("--gap", default="5,9", help="s between faults: MIN,MAX")
    parser.add_argument("--nodes", type=int, default=3, help="agents at the start (max 3)")
    parser.add_argument("--first", type=float, default=3.0, help="s to the first fault")
    parser.add_argument("--quiet", type=float, default=8.0, help="s without faults at the end")
    parser.add_argument("--grace", type=float, default=60.0, help="stop -> hung after this")
    parser.add_argument("--warm-timeout", type=float, default=120.0)
    parser.add_argument("--rdzv-conf", default=RDZV_CONF)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.launchers = [n for n in args.launchers.split(",") if n]
    unknown = [n for n in args.launchers if n not in LAUNCHERS]
    if unknown or not args.launchers:
        parser.error(f"unknown launchers {unknown} (known: {', '.join(LAUNCHERS)})")
    try:
        args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()] or list(
            range(args.first_seed, args.first_seed + args.episodes)
        )
    except ValueError:
        parser.error("--seeds takes whole numbers: N,M,...")
    args.kinds = tuple(k for k in args.kinds.split(",") if k)
    if not args.kinds or set(args.kinds) - set(KINDS):
        parser.error(f"--kinds takes some of {', '.join(KINDS)}")
    try:
        low, high = (float(x) for x in args.gap.split(","))
    except ValueError:
        parser.error("--gap takes MIN,MAX in seconds")
    if not 0 < low <= high:
        parser.error("--gap takes 0 < MIN <= MAX")
    args.gap = (low, high)
    if not 1 <= args.nodes <= 3:
        parser.error("--nodes takes 1, 2 or 3 (--nnodes=1:3)")
    if args.episodes < 1 or args.duration < 5:
        parser.error("--episodes >= 1 and --duration >= 5")
    return args


def installed(module: str) -> bool:
    done = subprocess.run([PY, "-c", f"import {module}"], capture_output=True)
    return done.returncode == 0


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # so the episode under way ends its processes


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, interrupted)
    launchers = []
    for name in args.launchers:
        if installed(LAUNCHERS[name].module.rsplit(".", 1)[0]):
            launchers.append(LAUNCHERS[name])
        else:
            print(f"chaos: {name} is not installed here, left out", file=sys.stderr)
    if not launchers:
        print("chaos: none of the launchers is installed", file=sys.stderr)
        return 2
    settings = Settings(
        duration=args.duration,
        nodes=args.nodes,
        rdzv_conf=args.rdzv_conf,
        grace=args.grace,
        warm_timeout=args.warm_timeout,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {
        "command": " ".join([os.path.basename(PY), *sys.argv]),
        "settings": settings.__dict__,
        "kinds": args.kinds,
        "gap": args.gap,
        "first": args.first,
        "quiet": args.quiet,
        "load_before": load(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    print(f"chaos: {meta['load_before']}", flush=True)
    results: dict[str, list[dict[str, object]]] = {lc.name: [] for lc in launchers}
    try:
        run_all(args, launchers, settings, meta, results)
    except KeyboardInterrupt:
        print("chaos: interrupted; the episodes so far are in results.json", file=sys.stderr)
        return 130
    print(write(args.out, meta, results), flush=True)
    return 0


def run_all(
    args: argparse.Namespace,
    launchers: list[Launcher],
    settings: Settings,
    meta: dict[str, object],
    results: dict[str, list[dict[str, object]]],
) -> None:
    for seed in args.seeds:
        faults = plan(
            seed,
            duration=args.duration,
            kinds=args.kinds,
            gap=args.gap,
            nodes=args.nodes,
            first=args.first,
            quiet=args.quiet,
        )
        for launcher in launchers:
            folder = args.out / "episodes" / f"{launcher.name}-seed{seed}"
            episode = Episode(launcher, seed, faults, settings, folder)
            result = episode.run()
            result["load"] = load().split("load average:")[-1].strip()
            results[launcher.name].append(result)
            recov = [x["recovery"] for x in result["recoveries"]]  # type: ignore[union-attr]
            print(
                f"seed {seed} {launcher.name:14} {result['outcome']:12} "
                f"passed={result['passed']} checks={result['checks']} "
                f"faults={[f['fault'] for f in result['faults']]} recovery={recov} "  # type: ignore[index, union-attr]
                f"load {result['load']}",
                flush=True,
            )
            for mark in result["timeline"]:  # type: ignore[union-attr]
                how = "trained through" if mark["through"] else f"old world on {mark['held']}"
                print(f"  {mark['fault']:11} {mark['phases']} {how}")
            write(args.out, meta, results)


def write(out: Path, meta: dict[str, object], results: dict[str, list[dict[str, object]]]) -> str:
    summaries = {name: report.summarize(rs) for name, rs in results.items()}  # type: ignore[arg-type]
    phases = {name: timeline.breakdown(rs, KINDS) for name, rs in results.items()}  # type: ignore[arg-type]
    meta = {**meta, "load_after": load()}
    (out / "results.json").write_text(
        json.dumps(
            {"meta": meta, "summary": summaries, "phases": phases, "episodes": results}, indent=1
        )
    )
    text = (
        f"{meta['command']}\nload before: {meta['load_before']}\nload after: {meta['load_after']}"
        f"\n\n{report.table(summaries)}\n\n{timeline.table(phases)}\n"
    )
    (out / "table.md").write_text(text)
    return text


if __name__ == "__main__":
    sys.exit(main())
