"""``tpelastic sim SCENARIO``: simulate an elastic job described by a TOML/JSON scenario file.

Prints the summary; ``--trace`` writes every event as JSON lines (the launcher's event schema),
``--plot`` draws the timeline (needs the ``sim`` extra), ``--seed`` overrides the file's seed.
Runs of :data:`BIG_RUN_NODES` nodes or more pause Python's cyclic garbage collector.
"""

from __future__ import annotations

import argparse

from tpelastic.adapters.sim.collector import collector_paused
from tpelastic.adapters.sim.plot import PlotUnavailable, plot_timeline
from tpelastic.adapters.sim.scenario_file import load_scenario
from tpelastic.adapters.sim.trace import write_trace
from tpelastic.cli.errors import UsageError
from tpelastic.core.sim.run import SimReport, run_scenario
from tpelastic.core.sim.scenario import Scenario, ScenarioError

# From this many nodes on, the collector's passes over the run's millions of live objects cost a
# fifth of the CPU or more and find nothing (the simulation's values are freed by reference
# counting): such runs go without it (docs/benchmarks-sim.md).
BIG_RUN_NODES = 1_000


def add_parser(commands: argparse._SubParsersAction, name: str) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser(name, help="simulate an elastic job from a scenario file")
    parser.add_argument("scenario", help="a .toml or .json scenario (see docs/howto-simulate.md)")
    parser.add_argument("--trace", metavar="OUT.jsonl", help="write the event trace here")
    parser.add_argument("--plot", metavar="OUT.png", help="draw the timeline here (png/svg)")
    parser.add_argument("--seed", type=int, help="use this seed instead of the scenario's")
    parser.add_argument(
        "--quiet", action="store_true", help="print the summary only, not the per-node log"
    )


def run(args: argparse.Namespace) -> int:
    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as error:
        raise UsageError(str(error)) from None
    report = simulate(scenario, seed=args.seed)
    if not args.quiet:
        for record in report.records:
            if record.name.startswith(("node.", "sim.fault", "rendezvous.joined", "store.")):
                fields = " ".join(f"{k}={v}" for k, v in record.fields)
                print(f"{record.t:9.2f} {record.node or '-':>10} {record.name} {fields}".rstrip())
        print()
    print("\n".join(report.summary.lines()))
    if args.trace:
        try:
            count = write_trace(report.records, args.trace)
        except OSError as error:
            raise UsageError(f"cannot write the trace to {args.trace}: {error.strerror}") from None
        print(f"wrote {count} events to {args.trace}")
    if args.plot:
        try:
            plot_timeline(report.records, report.summary, args.plot)
        except PlotUnavailable as error:
            raise UsageError(str(error)) from None
        except (OSError, ValueError) as error:
            raise UsageError(f"cannot draw the plot to {args.plot}: {error}") from None
        print(f"wrote the timeline to {args.plot}")
    return 0


def simulate(scenario: Scenario, seed: int | None = None) -> SimReport:
    """Run ``scenario``; with :data:`BIG_RUN_NODES` nodes or more, the collector is paused.

    Raises:
        SimulationStuck: the machines looped without time moving (a bug in tpelastic).
    """
    if scenario.nodes >= BIG_RUN_NODES:
        with collector_paused():
            return run_scenario(scenario, seed=seed)
    return run_scenario(scenario, seed=seed)
