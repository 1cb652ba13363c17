"""Simulation: run the real core machines for many nodes in virtual time.

``Cluster`` runs the real rendezvous join machine for every node over an in-memory store, with
faults (crash, graceful leave, late join, worker failure, heartbeat loss, close) and virtual
time. The full scenario runner, latency model and explorer arrive with the simulation issue.
"""

from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.sim.cluster import Cluster, SimNode, SimulationStuck, Status

__all__ = ["Cluster", "RendezvousConfig", "SimNode", "SimulationStuck", "Status"]
