"""Judge an earlier run's episodes again from what they left on disk (the workers' lines, the
agents' logs and each episode's result.json), with the checks and the timeline as they are now.

    python bench/chaos/rejudge.py bench/results/chaos/<label>

Rewrites ``results.json`` and ``table.md`` in that folder; the episodes keep their seeds, faults,
exits, orphans, hangs and loads as recorded.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chaos import checks, report, timeline
from chaos.episode import LAUNCHERS
from chaos.schedule import KINDS, OWN


def rejudge_episode(folder: Path, max_restarts: int) -> dict[str, Any]:
    old = json.loads((folder / "result.json").read_text())
    t0 = float(old["t0"])

    def absolute(item: dict[str, Any]) -> dict[str, Any]:
        return {**item, "t": item["t"] + t0} if "t" in item else dict(item)

    injected = [absolute(f) for f in old["faults"]]
    exits = {e["node"]: e["t"] + t0 for e in old["events"] if e["kind"] == "exit"}
    nodes = [{**n, "exited": exits.get(n["name"], 0.0), "started": 0.0} for n in old["nodes"]]
    lines = checks.read_lines(folder / "lines")
    result = checks.judge(
        lines=lines,
        injected=injected,
        nodes=nodes,
        hung=old["hung_nodes"],
        orphans=old["orphans"],
        warm=bool(t0),
        max_restarts=max_restarts,
        budget_scope=LAUNCHERS[old["launcher"]].budget_scope,
        own=OWN,
    )
    agents = timeline.agent_lines(folder / "nodes", float(old.get("wall_minus_mono", 0.0)))
    keep = ("launcher", "seed", "host", "t0", "wall", "faults", "events", "load", "wall_minus_mono")
    result.update({k: old[k] for k in keep if k in old})
    result["timeline"] = timeline.timelines(lines, injected, checks.worlds(lines), agents)
    (folder / "result.json").write_text(json.dumps(result, indent=1))
    return result


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not (Path(argv[0]) / "results.json").is_file():
        print("usage: rejudge.py RUN_FOLDER (one with results.json and episodes/)", file=sys.stderr)
        return 2
    out = Path(argv[0])
    saved = json.loads((out / "results.json").read_text())
    meta = saved["meta"]
    max_restarts = int(meta["settings"]["max_restarts"])
    results: dict[str, list[dict[str, Any]]] = {}
    for name, episodes in saved["episodes"].items():
        results[name] = []
        for e in episodes:
            again = rejudge_episode(out / "episodes" / f"{name}-seed{e['seed']}", max_restarts)
            again["load"] = e.get("load")  # measured after the episode, kept in results.json only
            results[name].append(again)
    summaries = {name: report.summarize(rs) for name, rs in results.items()}
    phases = {name: timeline.breakdown(rs, KINDS) for name, rs in results.items()}
    (out / "results.json").write_text(
        json.dumps(
            {"meta": meta, "summary": summaries, "phases": phases, "episodes": results}, indent=1
        )
    )
    text = (
        f"{meta['command']}\nload before: {meta['load_before']}\n"
        f"load after: {meta.get('load_after', '?')}\n(judged again by bench/chaos/rejudge.py)"
        f"\n\n{report.table(summaries)}\n\n{timeline.table(phases)}\n"
    )
    (out / "table.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
