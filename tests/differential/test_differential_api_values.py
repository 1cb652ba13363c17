"""The library values added for torch's API, compared with torch 2.13's input by input: the
rendezvous event's JSON, the log layout ``LogsSpecs.reify(envs)`` makes, ``WorkerGroup(spec)``
and the agent's status events. Each test skips without torch."""

from __future__ import annotations

import io
import json
import os
import tempfile
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from api_surface import import_oracle
from hypothesis import given, settings
from hypothesis import strategies as st

from tpelastic.agent import WorkerGroup, WorkerSpec
from tpelastic.events import ConsoleEventHandler, NodeState, RdzvEvent
from tpelastic.events import construct_and_record_rdzv_event as construct_and_record
from tpelastic.multiprocessing import LogsSpecs, Std


def torch_module(relative: str) -> Any:
    module = import_oracle("torch", relative)
    if module is None:
        pytest.skip("torch is not importable here (pip install torch==2.13.0 to compare)")
    return module


optional_int = st.none() | st.integers(0, 2**31)


@settings(max_examples=30)
@given(
    texts=st.lists(st.text(max_size=6), min_size=5, max_size=5),
    pid=st.integers(0, 2**22),
    state=st.sampled_from(list(NodeState)),
    rank=optional_int,
    local_id=optional_int,
)
def test_rdzv_event_json_is_torchs_both_ways(
    texts: list[str], pid: int, state: NodeState, rank: int | None, local_id: int | None
) -> None:
    api = torch_module("distributed.elastic.events.api")
    name, run_id, message, host, endpoint = texts
    ours = RdzvEvent(name, run_id, message, host, pid, state, endpoint, rank, local_id, "tb")
    theirs = api.RdzvEvent(
        name, run_id, message, host, pid, api.NodeState[state.name], endpoint, rank, local_id, "tb"
    )
    assert json.loads(ours.serialize()) == json.loads(theirs.serialize())
    assert api.RdzvEvent.deserialize(ours.serialize()) == theirs
    assert RdzvEvent.deserialize(theirs.serialize()) == ours


def test_construct_and_record_names_the_caller_and_carries_the_failure() -> None:
    api = torch_module("distributed.elastic.events.api")
    out = io.StringIO()
    try:
        raise RuntimeError("store lost")
    except RuntimeError:
        construct_and_record(
            "run1", "join failed", NodeState.FAILED, rank=2, destination=ConsoleEventHandler(out)
        )
    line = json.loads(out.getvalue())
    assert line["name"] == f"{os.path.basename(__file__)}:{_this_function()}"
    assert line["state"] == "FAILED" and line["pid"] == os.getpid() and line["rank"] == 2
    assert "RuntimeError: store lost" in line["error_trace"]
    event = RdzvEvent.deserialize(json.dumps({**line, "node_state": line["state"]}))
    assert api.RdzvEvent.deserialize(event.serialize()).message == "join failed"


def _this_function() -> str:
    return "test_construct_and_record_names_the_caller_and_carries_the_failure"


std = st.sampled_from(list(Std))
choices = std | st.dictionaries(st.integers(0, 4), std, max_size=4)


def _relative(dest: Any, attempt_dir: str) -> dict[str, Any]:
    """A LogsDest's tables with paths relative to the attempt folder ("" and devnull kept)."""

    def rel(path: str) -> str:
        return path if path in ("", os.devnull) else os.path.relpath(path, attempt_dir)

    tables = ("stdouts", "stderrs", "tee_stdouts", "tee_stderrs", "error_files")
    found: dict[str, Any] = {t: {r: rel(p) for r, p in getattr(dest, t).items()} for t in tables}
    found["filtered"] = (rel(dest.filtered_stdout), rel(dest.filtered_stderr))
    return found


@settings(max_examples=40, deadline=None)
@given(
    nprocs=st.integers(1, 4),
    redirects=choices,
    tee=choices,
    shown=st.none() | st.frozensets(st.integers(0, 4), max_size=3),
)
def test_reify_lays_out_torchs_files(
    nprocs: int, redirects: Any, tee: Any, shown: frozenset[int] | None
) -> None:
    mp = torch_module("distributed.elastic.multiprocessing")
    to_torch = {s: mp.Std(int(s)) for s in Std}

    def torchs(choice: Any) -> Any:
        if isinstance(choice, dict):
            return {r: to_torch[s] for r, s in choice.items()}
        return to_torch[choice]

    def envs() -> dict[int, dict[str, str]]:
        return {
            r: {"TORCHELASTIC_RUN_ID": "job", "TORCHELASTIC_RESTART_COUNT": "0"}
            for r in range(nprocs)
        }

    with tempfile.TemporaryDirectory() as ours_dir, tempfile.TemporaryDirectory() as theirs_dir:
        our_envs, their_envs = envs(), envs()
        ours = LogsSpecs(ours_dir, redirects, tee, shown).reify(our_envs)
        specs = mp.DefaultLogsSpecs(
            theirs_dir, torchs(redirects), torchs(tee), set(shown or ()) or None
        )
        theirs = specs.reify(their_envs)
        their_attempt = os.path.dirname(theirs.filtered_stdout)
        assert os.path.basename(ours.attempt_dir) == os.path.basename(their_attempt)
        assert _relative(ours, ours.attempt_dir) == _relative(theirs, their_attempt)
        for env in (our_envs, their_envs):
            assert all(e["TORCHELASTIC_ERROR_FILE"].endswith("error.json") for e in env.values())


def test_worker_group_of_a_spec_is_torchs() -> None:
    api = torch_module("distributed.elastic.agent.server.api")
    theirs = api.WorkerGroup(api.WorkerSpec("r", 3, rdzv_handler=None, entrypoint="x"))
    ours = WorkerGroup(WorkerSpec("r", 3, rdzv_handler=None, entrypoint="x"))
    assert [w.local_rank for w in ours.workers] == [w.local_rank for w in theirs.workers]
    assert [w.global_rank for w in ours.workers] == [w.global_rank for w in theirs.workers]
    assert ours.state.name == theirs.state.name == "INIT"
    for name in ("store", "group_rank", "group_world_size", "master_addr", "master_port"):
        assert getattr(ours, name) is getattr(theirs, name) is None, name


def test_agent_status_events_carry_torchs_name_and_metadata() -> None:
    api = torch_module("distributed.elastic.agent.server.api")
    from tpelastic.adapters.launcher.launch import worker_spec
    from tpelastic.agent import LocalElasticAgent
    from tpelastic.launcher import LaunchConfig

    config = LaunchConfig(
        1, 1, 2, run_id="job", rdzv_backend="c10d", rdzv_endpoint="localhost:0", standalone=True
    )
    agent = LocalElasticAgent(worker_spec(config, "python", ["train.py"]))
    handler = SimpleNamespace(get_run_id=lambda: "job", get_backend=lambda: "c10d")
    spec = api.WorkerSpec("default", 2, rdzv_handler=handler, entrypoint="python")
    # torch's event builder reads only these attributes of its agent.
    torch_agent = SimpleNamespace(
        _worker_group=api.WorkerGroup(spec), _total_execution_time=0, _remaining_restarts=3
    )
    for ours, state in (
        (agent.get_event_succeeded(), "SUCCEEDED"),
        (agent.get_event_failed(), "FAILED"),
    ):
        theirs = api.SimpleElasticAgent._construct_event(torch_agent, state, api.EventSource.AGENT)
        assert ours.name == theirs.name == f"torchelastic.worker.status.{state}"
        assert set(ours.metadata) == set(theirs.metadata)
        assert ours.metadata["run_id"] == "job" and ours.metadata["state"] == state
        assert json.loads(ours.metadata["metadata"]) == json.loads(theirs.metadata["metadata"])


@settings(max_examples=30)
@given(
    nodes=st.tuples(st.integers(1, 50), st.integers(0, 50)),
    seconds=st.lists(st.integers(1, 10**5), min_size=4, max_size=4),
    attempts=st.integers(2, 9),
)
def test_rendezvous_settings_built_as_torchs_read_back_the_same(
    nodes: tuple[int, int], seconds: list[int], attempts: int
) -> None:
    dyn = torch_module("distributed.elastic.rendezvous.dynamic_rendezvous")
    from tpelastic.rendezvous import RendezvousSettings, RendezvousTimeout

    low, extra = nodes
    join, last_call, close, beat = (timedelta(seconds=s) for s in seconds)
    args = (low, low + extra)
    ours = RendezvousSettings(
        "job", *args, RendezvousTimeout(join, last_call, close, beat), beat, attempts
    )
    theirs = dyn.RendezvousSettings(
        "job", *args, dyn.RendezvousTimeout(join, last_call, close, beat), beat, attempts
    )
    fields = ("run_id", "min_nodes", "max_nodes", "keep_alive_interval", "keep_alive_max_attempt")
    for name in fields:
        assert getattr(ours, name) == getattr(theirs, name), name
    for name in ("join", "last_call", "close", "heartbeat"):
        assert getattr(ours.timeout, name) == getattr(theirs.timeout, name), name
    assert ours.config.heartbeat_timeout == beat.total_seconds() * attempts
