"""``tpelastic status`` against a live 3-node job of real agents on the tcp backend (one crash,
one in-place restart): members, round, restarts and per-rank steps, from the store and from one
agent's endpoint; and the records it reads, checked field by field."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from obs_helpers import REPO, WORKER, fast_detection, free_port, wait_for

from tpelastic.adapters.status import (
    decode_status,
    encode_status,
    read_view,
    status_key,
)
from tpelastic.adapters.stores.memory import MemoryStore
from tpelastic.core.rendezvous.records import StateCorrupt


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TPELASTIC_", "PET_"))}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["TPELASTIC_STATUS_INTERVAL"] = "0.3"
    return env


def status(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "tpelastic", "status", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=_env())


def test_status_json_of_a_live_three_node_job(tmp_path: Path) -> None:
    port, health = free_port(), free_port()
    release = tmp_path / "release"
    store_args = ["--rdzv-backend", "tcp", "--rdzv-endpoint", f"127.0.0.1:{port}"]
    nodes = []
    for i in range(3):
        extra = ["--health-port", str(health)] if i == 0 else []
        cmd = [
            sys.executable, "-m", "tpelastic", "run", "--nnodes", "3", "--nproc-per-node", "2",
            *store_args, "--rdzv-id", "status-job", "--local-addr", "127.0.0.1",
            "--rdzv-conf", fast_detection(0.5, "join_timeout=60"), "--max-restarts", "1", *extra,
            WORKER, "--crash-rank", "4", "--hold-until", str(release),
        ]  # fmt: skip
        with open(tmp_path / f"node{i}.log", "wb") as out:
            nodes.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=_env()))
    try:

        def settled() -> dict[str, object] | None:
            done = status(*store_args, "--rdzv-id", "status-job", "--json")
            assert done.returncode == 0, done.stderr
            view = json.loads(done.stdout)
            ranks = view["ranks"]
            stepping = len(ranks) == 6 and all((r["step"] or 0) >= 3 for r in ranks)
            return view if view["restart_count"] == 1 and stepping else None

        view = wait_for(settled, timeout=120, what="3 members, 1 restart, 6 stepping ranks")
        assert view["v"] == 1 and view["run_id"] == "status-job" and view["closed"] is None
        assert view["round"] == 0 and view["attempt"] == 1 and view["max_restarts"] == 1
        members = view["members"]
        assert [m["rank"] for m in members] == [0, 1, 2]
        assert all(m["addr"] == "127.0.0.1" for m in members)
        assert len({m["node"] for m in members}) == 3
        for m in members:
            record = m["status"]
            assert (record["state"], record["restart_count"]) == ("RUNNING", 1)
            assert record["group_rank"] == m["rank"] and record["local_world_size"] == 2
        assert [r["rank"] for r in view["ranks"]] == [0, 1, 2, 3, 4, 5]
        by_node = {r["rank"]: r["node"] for r in view["ranks"]}
        assert by_node[4] == by_node[5] == members[2]["node"]  # node rank 2 owns ranks 4, 5
        assert all(r["age_s"] is not None and r["age_s"] < 60 for r in view["ranks"])
        assert len(view["slowest"]) == 3
        assert view["last_failure"] is not None and "exit" in view["last_failure"]["reason"]

        # The same view from one agent's endpoint, and as a table.
        from_agent = json.loads(status("--agent", f"127.0.0.1:{health}", "--json").stdout)
        assert [m["node"] for m in from_agent["members"]] == [m["node"] for m in members]
        table = status(*store_args, "--rdzv-id", "status-job")
        assert table.returncode == 0, table.stderr
        assert "round 0, attempt 1, 3 member(s), restarts used 1, left 0" in table.stdout
        assert members[2]["node"] in table.stdout and "last failure" in table.stdout
    finally:
        release.touch()
        codes = []
        for proc in nodes:
            try:
                codes.append(proc.wait(timeout=90))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
                codes.append(None)
    logs = "\n".join((tmp_path / f"node{i}.log").read_text() for i in range(3))
    assert codes == [0, 0, 0], logs


def test_bad_status_arguments_are_one_line_errors() -> None:
    done = status("--rdzv-id", "x")
    assert done.returncode == 2 and "give --rdzv-endpoint and --rdzv-id" in done.stderr
    done = status("--agent", f"127.0.0.1:{free_port()}")
    assert done.returncode == 2 and "cannot read http://127.0.0.1:" in done.stderr
    assert "Traceback" not in done.stderr


RECORD = {
    "run_id": "r", "node": "n", "host": "h", "pid": 1, "role": "default", "state": "RUNNING",
    "round": 0, "attempt": 0, "group_rank": 0, "group_world_size": 1, "local_world_size": 1,
    "restart_count": 0, "max_restarts": 0, "last_failure": None, "seq": 0,
    "ranks": [{"rank": 0, "local_rank": 0, "step": 3, "age_s": 0.5, "step_time_s": 0.1,
               "waiting": False, "collectives": 0, "collective": ""}],
}  # fmt: skip


def test_records_round_trip_and_anything_else_is_refused() -> None:
    assert decode_status(encode_status(RECORD)) == {**RECORD, "v": 1, "kind": "tpelastic.status"}
    bad = [
        b"\x80\x04pickle",
        b"[]",
        json.dumps({**RECORD, "v": 2, "kind": "tpelastic.status"}).encode(),
        json.dumps({**RECORD, "v": 1, "kind": "tpelastic.status", "pid": "1"}).encode(),
        json.dumps({**RECORD, "v": 1, "kind": "tpelastic.status", "ranks": [{}]}).encode(),
    ]
    for raw in bad:
        with pytest.raises(StateCorrupt):
            decode_status(raw)


class CountingStore(MemoryStore):
    """A real in-memory store that also counts writes: the reader must make none."""

    writes = 0

    def set(self, key: str, value: bytes) -> None:
        CountingStore.writes += 1
        super().set(key, value)


def test_the_view_reads_without_writing_and_reports_unreadable_records() -> None:
    store = CountingStore()
    store.set(status_key("r", "n"), b"garbage")
    CountingStore.writes = 0
    view = read_view(store, "r")
    assert (view["round"], view["members"], view["ranks"]) == (None, [], [])
    assert CountingStore.writes == 0


def test_the_table_shows_the_stuck_rank_and_the_stragglers() -> None:
    from rich.console import Console

    from tpelastic.adapters.status import stragglers, stuck_rank
    from tpelastic.cli.status import render

    entry = RECORD["ranks"][0]
    ranks = [
        {**entry, "rank": 0, "node": "a", "host": "ha", "node_rank": 0, "waiting": True,
         "collectives": 5, "collective": "all_reduce", "age_s": 30.0},
        {**entry, "rank": 1, "node": "b", "host": "hb", "node_rank": 1, "collectives": 4,
         "step_time_s": 0.5},
        {**entry, "rank": 2, "node": "b", "host": "hb", "node_rank": 1, "waiting": True,
         "collectives": 5, "collective": "all_reduce", "age_s": 30.0},
    ]  # fmt: skip
    view = {
        "v": 1, "run_id": "r", "closed": None, "round": 2, "attempt": 0, "restart_count": 1,
        "max_restarts": 3, "members": [{"rank": 0, "node": "a", "addr": "10.0.0.1",
        "status": {**RECORD, "v": 1}}, {"rank": 1, "node": "b", "addr": "", "status": None}],
        "ranks": ranks, "slowest": ranks[1:2], "stuck": stuck_rank(ranks),
        "stragglers": stragglers(ranks), "last_failure": {"node": "b", "reason": "exit 1"},
        "problems": ["node c: not JSON"],
    }  # fmt: skip
    console = Console(record=True, width=160)
    console.print(render(view))
    text = console.export_text()
    assert "round 2, attempt 0, 2 member(s), restarts used 1, left 2" in text
    assert "stuck: rank 1 (node 1, hb) never reached all_reduce #5 that rank(s) 0, 2" in text
    assert "stragglers (vs the median step time): rank 1 (5.0x)" in text
    assert "in all_reduce (#5)" in text and "no record" in text
    assert "last failure (b): exit 1" in text and "unreadable: node c: not JSON" in text
