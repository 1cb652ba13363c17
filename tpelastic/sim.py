"""Simulation: run the real core machines for many nodes in virtual time.

``Cluster`` runs the real rendezvous join machine for every node over a simulated store, with a
per-batch latency and faults (crash, graceful leave, late join, slow node, worker failure,
heartbeat loss, store outage, partition of a node, close). A worker failure restarts the round's
workers in place as its next attempt (``restart_in_place``, the default) or re-forms the round.
A :class:`Scenario` describes a run as data (``load_scenario`` reads one from TOML or JSON);
:func:`run_scenario` simulates it and returns a :class:`SimReport` (summary and trace);
``write_trace`` and ``plot_timeline`` turn that into the launcher's event stream and a picture.
:func:`explore` checks every interleaving of a small configuration against the invariants of
``specs/rendezvous_join.md``. Wrap runs of thousands of nodes in ``with collector_paused():``
(Python's cyclic garbage collector, which such runs pay for and do not need).
"""

from tpelastic.adapters.sim.collector import collector_paused
from tpelastic.adapters.sim.plot import PlotUnavailable, plot_timeline
from tpelastic.adapters.sim.scenario_file import load_scenario
from tpelastic.adapters.sim.trace import record_to_event, write_trace
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.sim.cluster import Cluster, SimNode, SimRecord, SimulationStuck, Status
from tpelastic.core.sim.explore import (
    Bounds,
    Counterexample,
    Exploration,
    Violation,
    explore,
    formed_prefix,
    replay,
)
from tpelastic.core.sim.rng import SplitMix64
from tpelastic.core.sim.run import AttemptStat, RoundStat, SimReport, SimSummary, run_scenario
from tpelastic.core.sim.scenario import (
    Fault,
    FaultRate,
    Scenario,
    ScenarioError,
    scenario_from_dict,
)

__all__ = [
    "AttemptStat",
    "Bounds",
    "Counterexample",
    "Exploration",
    "Violation",
    "explore",
    "formed_prefix",
    "replay",
    "Cluster",
    "Fault",
    "FaultRate",
    "PlotUnavailable",
    "RendezvousConfig",
    "RoundStat",
    "Scenario",
    "ScenarioError",
    "SimNode",
    "SimRecord",
    "SimReport",
    "SimSummary",
    "SimulationStuck",
    "SplitMix64",
    "Status",
    "collector_paused",
    "load_scenario",
    "plot_timeline",
    "record_to_event",
    "run_scenario",
    "scenario_from_dict",
    "write_trace",
]
