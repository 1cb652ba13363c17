"""Small parts of the wiring on their own: dropping a stopped worker's timers, the agent's
metrics by state and reason."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tpelastic.adapters.agent import publish
from tpelastic.adapters.sinks import metrics as metrics_module
from tpelastic.adapters.sinks.metrics import MetricData, MetricsRouter, run_router
from tpelastic.core.worker_group import WorkerFailure
from tpelastic.timer import TimerRequest, TimerServer


class ListQueue:
    """A request queue that hands out what the test put in (a real RequestQueue, in memory)."""

    def __init__(self) -> None:
        self.pending: list[TimerRequest] = []

    def get(self, size: int, timeout: float) -> list[TimerRequest]:
        out, self.pending = self.pending[:size], self.pending[size:]
        return out


@pytest.fixture
def sleeper():  # type: ignore[no-untyped-def]
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait(timeout=10)


def test_a_forgotten_worker_is_not_killed_for_its_old_deadline(sleeper) -> None:  # type: ignore[no-untyped-def]
    queue = ListQueue()
    server = TimerServer(queue, max_interval=0.01, kill_signal=signal.SIGKILL)
    queue.pending.append(TimerRequest(worker_id=sleeper.pid, scope_id="s", expiration_time=1.0))
    server.run_once(now=0.5)  # registered, not yet due
    server.forget_workers({sleeper.pid})
    assert server.run_once(now=2.0) == []
    assert sleeper.poll() is None  # still alive
    queue.pending.append(TimerRequest(worker_id=sleeper.pid, scope_id="s", expiration_time=1.0))
    (expired,) = server.run_once(now=2.0)  # the control: without forgetting, it is killed
    assert expired.worker_id == sleeper.pid and expired.killed
    assert sleeper.wait(timeout=10) == -signal.SIGKILL


class Collect:
    def __init__(self) -> None:
        self.seen: list[tuple[str, float]] = []

    def emit(self, data: MetricData) -> None:
        self.seen.append((data.name, data.value))


@pytest.fixture
def collect() -> Collect:
    return Collect()


@pytest.fixture
def metrics(collect: Collect) -> list[tuple[str, float]]:
    return collect.seen


@pytest.fixture
def published(collect: Collect) -> publish.Publisher:
    """The agent's publisher over a router of its own, as the launcher builds one per run."""
    return publish.Publisher(run_router(collect))


def _failure(local_rank: int, signal_name: str | None) -> WorkerFailure:
    return WorkerFailure(
        local_rank=local_rank, global_rank=local_rank, exitcode=1, signal=signal_name, at=0.0
    )


def test_failures_are_counted_by_reason_and_workers_by_state(metrics, published) -> None:  # type: ignore[no-untyped-def]
    failures = (_failure(0, "SIGKILL"), _failure(1, "SIGKILL"), _failure(2, None))
    published.failed(failures, timed_out={0}, local_world_size=4)
    counted = sorted((n, v) for n, v in metrics if n.startswith("failures."))
    assert counted == [("failures.exit", 1), ("failures.signal", 1), ("failures.timer", 1)]
    states = {n: v for n, v in metrics if n.startswith("workers.")}
    assert states == {
        "workers.INIT": 0,
        "workers.HEALTHY": 1,
        "workers.UNHEALTHY": 0,
        "workers.SUCCEEDED": 0,
        "workers.FAILED": 3,
        "workers.STOPPED": 0,
        "workers.UNKNOWN": 0,
    }


def test_a_misspelt_worker_state_fails_loudly() -> None:
    with pytest.raises(KeyError, match="HEALTY"):
        publish.Publisher().workers(HEALTY=1)


def test_a_run_router_keeps_the_agents_group_and_sends_the_rest_to_the_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The process's routing (torch's configure) is isolated here, and a run's router is no
    # process-wide state: two runs' routers do not see each other's metrics.
    process, mine, other = Collect(), Collect(), Collect()
    monkeypatch.setattr(metrics_module, "_PROCESS", MetricsRouter(default=process))
    publish.Publisher(run_router(mine)).stragglers(2)
    publish.Publisher(run_router(other)).stragglers(5)
    run_router(mine).put("loss", 0.5, "trainer")
    publish.Publisher().stragglers(7)  # no router: the process's, as torch's agent
    assert mine.seen == [("stragglers", 2.0)] and other.seen == [("stragglers", 5.0)]
    assert process.seen == [("loss", 0.5), ("stragglers", 7.0)]


def test_a_step_that_changes_and_orders_nothing_is_not_recorded(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from attrs import evolve

    from tpelastic.adapters.agent.observers import Observers
    from tpelastic.adapters.agent.spec import WorkerSpec
    from tpelastic.core import agent as ag
    from tpelastic.events import read_json_lines

    path = tmp_path / "events.jsonl"
    spec = WorkerSpec(
        "default",
        local_world_size=1,
        rdzv_handler=None,
        entrypoint="true",
        event_log_handler=f"jsonl:{path}",
    )
    config = ag.AgentConfig(max_restarts=0, min_nodes=1, max_nodes=1)
    full = evolve(
        ag.initial_state(config), phase=ag.AgentPhase.RUNNING, round=0, group_rank=0,
        group_world_size=1,
    )  # fmt: skip
    observers = Observers(spec, config, lambda: "run", lambda: full)
    waiting = ag.NodesWaiting(now=1.0, count=2)  # the world is full: nothing to do
    observers.stepped(full, waiting, ag.step(full, waiting, config))
    assert not path.exists()
    done = ag.WorkersSucceeded(now=2.0)
    observers.stepped(full, done, ag.step(full, done, config))
    (record,) = read_json_lines(path)
    assert record.metadata["seq"] == 0 and record.metadata["to"] == "EXIT_BARRIER"  # type: ignore[union-attr]
