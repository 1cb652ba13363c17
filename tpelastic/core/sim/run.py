"""Run a :class:`~tpelastic.core.sim.scenario.Scenario` on the simulated cluster (pure).

The scenario's faults are scheduled in virtual time, rate faults drawn from a SplitMix64 stream
seeded by the scenario, and the result is a :class:`SimReport`: a summary (rounds and when each
completed, restarts used, time lost to recovery, store operations) and every record of the run.
The same scenario and seed always give the same report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TypeVar

from attrs import evolve, frozen

from tpelastic.core.sim import faults
from tpelastic.core.sim.cluster import Cluster, SimRecord, Status
from tpelastic.core.sim.rng import SplitMix64
from tpelastic.core.sim.scenario import Fault, FaultRate, Scenario

T = TypeVar("T")

# Which nodes each fault may hit when the scenario names none.
_LIVE = (Status.JOINING, Status.TRAINING, Status.FENCED)
_TARGETS = {
    "crash": _LIVE,
    "lose_heartbeats": _LIVE,
    "partition": _LIVE,
    "slow": _LIVE,
    "leave": (Status.TRAINING,),
    "fail_workers": (Status.TRAINING,),
    "close": (Status.TRAINING,),
    "pause": (Status.TRAINING,),
    "store_host_death": tuple(Status),
}


@frozen(kw_only=True)
class RoundStat:
    """One completed round: its size, restart count, and when its nodes started training."""

    round_no: int
    world_size: int
    restart_count: int
    first_at: float
    all_at: float


@frozen(kw_only=True)
class AttemptStat:
    """One in-place attempt of a round: its restart count, when the worker failure that opened
    it happened (``first_at``) and when the last member restarted as it (``all_at``; the
    recovery took ``all_at - first_at``), and how many members restarted."""

    round_no: int
    attempt: int
    restart_count: int
    first_at: float
    all_at: float
    members: int


@frozen(kw_only=True)
class SimSummary:
    """The numbers a what-if question is about."""

    scenario: str
    seed: int
    virtual_seconds: float
    nodes_started: int
    rounds: tuple[RoundStat, ...]
    restarts_used: int
    time_lost: float
    store_ops: int
    store_batches: int
    failed_batches: int
    faults: tuple[tuple[str, int], ...]
    final_status: tuple[tuple[str, int], ...]
    overlaps: int
    attempts: tuple[AttemptStat, ...] = ()
    restarts_in_place: int = 0

    def lines(self) -> list[str]:
        """The summary as short human-readable lines."""
        out = [
            f"scenario {self.scenario!r}, seed {self.seed}: {self.nodes_started} nodes, "
            f"{self.virtual_seconds:g}s of virtual time",
            f"rounds completed: {len(self.rounds)}; restarts used: {self.restarts_used}; "
            f"time lost to recovery: {self.time_lost:.2f}s",
            f"store: {self.store_ops} operations in {self.store_batches} batches "
            f"({self.failed_batches} batches failed)",
            "faults: " + (", ".join(f"{k} x{n}" for k, n in self.faults) or "none"),
            "final: " + ", ".join(f"{k} {n}" for k, n in self.final_status),
            f"worlds that trained side by side: {self.overlaps}",
        ]
        if self.attempts:
            slowest = max(a.all_at - a.first_at for a in self.attempts)
            out.append(
                f"restarts in place: {len(self.attempts)} attempt(s), {self.restarts_in_place} "
                f"member restart(s), slowest recovery {slowest:.3f}s"
            )
        for stat in self.rounds:
            out.append(
                f"  round {stat.round_no}: {stat.world_size} nodes, restart count "
                f"{stat.restart_count}, training from {stat.first_at:.2f}s (all by "
                f"{stat.all_at:.2f}s)"
            )
            for each in self.attempts:
                if each.round_no == stat.round_no:
                    out.append(
                        f"    attempt {each.attempt}: restart count {each.restart_count}, "
                        f"{each.members} members restarted after a failure at "
                        f"{each.first_at:.2f}s (all by {each.all_at:.3f}s)"
                    )
        return out


@frozen(kw_only=True)
class SimReport:
    summary: SimSummary
    records: tuple[SimRecord, ...]


def build_cluster(scenario: Scenario, *, detail: bool = True) -> Cluster:
    """An empty cluster with the scenario's settings (no node started yet)."""
    retry = scenario.retry_after if scenario.on_store_error == "retry" else None
    return Cluster(
        config=scenario.config,
        latency=scenario.latency,
        retry_after=retry,
        detail=detail,
        restart_in_place=scenario.restart_in_place,
        max_restarts=scenario.max_restarts,
        peer_loss_fails_workers=scenario.peer_loss_fails_workers,
        read_timeout=scenario.read_timeout,
    )


def run_scenario(scenario: Scenario, *, seed: int | None = None, detail: bool = True) -> SimReport:
    """Simulate ``scenario`` (with ``seed`` instead of its own, if given).

    ``detail=False`` keeps only run-level records and no per-node log lines: for big runs.

    Raises:
        SimulationStuck: the machines looped without time moving (a bug in tpelastic).
    """
    if seed is not None:
        scenario = evolve(scenario, seed=seed)
    cluster = build_cluster(scenario, detail=detail)
    injector = _Injector(cluster, SplitMix64(scenario.seed))
    injector.start_nodes(scenario)
    for fault in scenario.faults:
        cluster.queue.schedule(fault.at, _bind(injector.inject, fault))
    for rate in scenario.rates:
        injector.arm_rate(rate, rate.start, 0)
    cluster.advance(scenario.duration)
    return SimReport(summary=summarize(cluster, scenario), records=tuple(cluster.records))


def _bind(function: Callable[[T], object], argument: T) -> Callable[[], None]:
    def call() -> None:
        function(argument)

    return call


class _Injector:
    """Carries out faults on the cluster, choosing nodes from the seeded stream when needed."""

    def __init__(self, cluster: Cluster, rng: SplitMix64) -> None:
        self.cluster = cluster
        self.rng = rng
        self.late = 0

    def start_nodes(self, scenario: Scenario) -> None:
        for i in range(scenario.nodes):
            name = f"node{i}"
            if scenario.start_spread > 0:
                at = self.rng.uniform() * scenario.start_spread
                self.cluster.queue.schedule(at, _bind(self.cluster.start, name))
            else:
                self.cluster.start(name)

    def arm_rate(self, rate: FaultRate, after: float, fired: int) -> None:
        at = after + self.rng.exponential(1.0 / rate.every)
        if at >= rate.stop or (rate.limit and fired >= rate.limit):
            return
        fault = Fault(
            at=at,
            kind=rate.kind,
            duration=rate.duration,
            extra_latency=rate.extra_latency,
        )

        def fire() -> None:
            self.inject(fault)
            self.arm_rate(rate, at, fired + 1)

        self.cluster.queue.schedule(at, fire)

    def inject(self, fault: Fault) -> None:
        cluster = self.cluster
        if fault.kind == "store_down":
            self._store_down(fault)
            return
        if fault.kind in ("store_pause", "delay"):
            self._store_wide(fault)
            return
        if fault.kind == "store_host_death" and not fault.node:
            fault = evolve(fault, node="node0")
        if fault.kind == "join":
            self.late += 1
            name = fault.node or f"late{self.late}"
            if name in cluster.nodes:
                self._skip(fault, f"node {name} exists")
                return
            self._applied(fault, name)
            cluster.start(name)
            return
        target = self._target(fault)
        if target is not None:
            self._applied(fault, target)
            self._hit(fault, target)

    def _hit(self, fault: Fault, name: str) -> None:
        cluster, queue = self.cluster, self.cluster.queue
        if fault.kind == "partition":
            cluster.partition(name)
            if fault.duration > 0:
                queue.schedule(cluster.now + fault.duration, _bind(cluster.heal, name))
        elif fault.kind == "slow":
            cluster.slow(name, fault.extra_latency)
            if fault.duration > 0:
                queue.schedule(cluster.now + fault.duration, lambda: cluster.slow(name, 0.0))
        elif fault.kind == "close":
            cluster.close(name)
        elif fault.kind == "pause":
            faults.pause_node(cluster, name)
            queue.schedule(cluster.now + fault.duration, _bind(self._resume, name))
        elif fault.kind == "store_host_death":
            faults.store_host_dies(cluster, name)
        else:
            getattr(cluster, fault.kind)(name)

    def _resume(self, name: str) -> None:
        faults.resume_node(self.cluster, name)

    def _store_wide(self, fault: Fault) -> None:
        self._applied(fault, "")
        cluster = self.cluster
        if fault.kind == "store_pause":
            if fault.duration > 0:
                faults.pause_store(cluster, fault.duration)
            return
        faults.delay_messages(cluster, fault.extra_latency)
        if fault.duration > 0:
            cluster.queue.schedule(
                cluster.now + fault.duration, lambda: faults.delay_messages(cluster, 0.0)
            )

    def _store_down(self, fault: Fault) -> None:
        self._applied(fault, "")
        self.cluster.store_unavailable()
        if fault.duration > 0:
            self.cluster.queue.schedule(
                self.cluster.now + fault.duration, self.cluster.store_available
            )

    def _target(self, fault: Fault) -> str | None:
        """The node to hit: the named one if it can take the fault, else one drawn at random."""
        allowed = _TARGETS[fault.kind]
        nodes = self.cluster.nodes
        if fault.node:
            node = nodes.get(fault.node)
            if node is None or node.status not in allowed:
                state = "unknown" if node is None else node.status.value
                self._skip(fault, f"node {fault.node} is {state}")
                return None
            return fault.node
        eligible = sorted(name for name, node in nodes.items() if node.status in allowed)
        if not eligible:
            self._skip(fault, "no node can take it")
            return None
        return self.rng.choice(eligible)

    def _applied(self, fault: Fault, node: str) -> None:
        self.cluster.records.append(
            SimRecord(
                t=self.cluster.now, name="sim.fault", node=node, fields=(("kind", fault.kind),)
            )
        )

    def _skip(self, fault: Fault, why: str) -> None:
        self.cluster.records.append(
            SimRecord(
                t=self.cluster.now,
                name="sim.fault_skipped",
                node=fault.node,
                fields=(("kind", fault.kind), ("reason", why)),
            )
        )


def summarize(cluster: Cluster, scenario: Scenario) -> SimSummary:
    """The summary of a finished run."""
    rounds = tuple(
        RoundStat(
            round_no=r,
            world_size=cluster.round_results[r].world_size,
            restart_count=cluster.round_results[r].restart_count,
            first_at=times[0],
            all_at=times[1],
        )
        for r, times in sorted(cluster.round_times.items())
    )
    faults = Counter(str(rec.fields[0][1]) for rec in cluster.records if rec.name == "sim.fault")
    statuses = Counter(node.status.value for node in cluster.nodes.values())
    attempts = tuple(
        AttemptStat(
            round_no=r,
            attempt=a,
            restart_count=cluster.round_results[r].restart_count + a,
            first_at=times[0],
            all_at=times[1],
            members=int(times[2]),
        )
        for (r, a), times in sorted(cluster.attempt_times.items())
    )
    used = max([s.restart_count for s in rounds] + [a.restart_count for a in attempts] + [0])
    return SimSummary(
        scenario=scenario.name,
        seed=scenario.seed,
        virtual_seconds=cluster.now,
        nodes_started=len(cluster.nodes),
        rounds=rounds,
        restarts_used=used,
        time_lost=cluster.time_lost(),
        store_ops=cluster.sim_store.ops,
        store_batches=cluster.sim_store.batches,
        failed_batches=cluster.sim_store.failed_batches,
        faults=tuple(sorted(faults.items())),
        final_status=tuple(sorted(statuses.items())),
        overlaps=len(cluster.overlaps),
        attempts=attempts,
        restarts_in_place=cluster.restarts,
    )
