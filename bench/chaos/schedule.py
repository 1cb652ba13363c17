"""A seeded schedule of faults, the same for every launcher.

The plan fixes each fault's kind, time and a draw in [0, 1) that picks its target among the
candidates alive when it fires (sorted by node name), so every launcher gets the same schedule
for a seed even though what is alive can differ between them. Kinds are drawn only where they
can apply to the nodes the plan expects alive: a node is killed or stopped with SIGTERM only
while another one stays up (never the store's host: that ends the job for every launcher), a new
node starts only below the maximum.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

KILL_WORKER = "kill-worker"  # SIGKILL of one worker
KILL_NODE = "kill-node"  # SIGKILL of an agent and all its workers (a machine lost)
TERM_AGENT = "term-agent"  # SIGTERM of an agent (a node leaving)
NEW_NODE = "new-node"  # one more agent starts
STOP_AGENT = "stop-agent"  # SIGSTOP of an agent that does not host the store, then SIGCONT
STOP_HOST = "stop-host"  # SIGSTOP of the agent that hosts the store, then SIGCONT

KINDS = (KILL_WORKER, KILL_NODE, TERM_AGENT, NEW_NODE, STOP_AGENT, STOP_HOST)
# The job's own failures, which the restart budget is for; the rest are membership changes.
OWN = frozenset({KILL_WORKER})


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the first world of every initial node trains
    kind: str
    pick: float  # picks the target among the candidates when the fault fires
    pause: float = 0.0  # SIGSTOP -> SIGCONT, for the stop kinds

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def plan(
    seed: int,
    *,
    duration: float,
    kinds: tuple[str, ...] = KINDS,
    nodes: int = 3,
    max_nodes: int = 3,
    first: float = 3.0,
    gap: tuple[float, float] = (5.0, 9.0),
    pause: tuple[float, float] = (2.0, 6.0),
    quiet: float = 8.0,
) -> list[Fault]:
    """Faults from ``first`` s until ``quiet`` s before ``duration``, ``gap`` s apart plus any
    pause, so that a SIGCONT always comes before the next fault."""
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown fault kinds: {', '.join(unknown)} (known: {', '.join(KINDS)})")
    rng = random.Random(seed)
    faults: list[Fault] = []
    alive = nodes
    at = first
    while at <= duration - quiet:
        allowed = [k for k in kinds if _applies(k, alive, max_nodes)]
        if not allowed:
            break
        kind = rng.choice(allowed)
        held = round(rng.uniform(*pause), 2) if kind in (STOP_AGENT, STOP_HOST) else 0.0
        faults.append(Fault(at=round(at, 2), kind=kind, pick=rng.random(), pause=held))
        alive += {KILL_NODE: -1, TERM_AGENT: -1, NEW_NODE: 1}.get(kind, 0)
        at += held + rng.uniform(*gap)
    return faults


def _applies(kind: str, alive: int, max_nodes: int) -> bool:
    if kind in (KILL_NODE, TERM_AGENT, STOP_AGENT):
        return alive >= 2
    if kind == NEW_NODE:
        return alive < max_nodes
    return True
