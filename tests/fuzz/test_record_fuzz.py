"""Hypothesis over record bytes against real waiting agents (specs/agent.md A14).

Two agents wait in round 0 with ``--nnodes 3`` on a live ``tpelastic store``; the example
writes arbitrary, mutated or copied bytes under one of the run's keys (or adds to a counter),
then a third agent comes. Whatever was written, every agent ends within a bound: all succeed
(the bytes were harmless, or the protocol carried on), or all fail with one line each, the two
waiting ones within seconds of each other, and none by waiting out its join timeout or losing
the store when another found corrupt state (the close reached it). No traceback, no agent past
its memory bound, no process of the run left, and the store still serves.

Each example starts three agents (about 20 s on a loaded 2-core machine), so the example count
is small; the named cases (a store the first agent hosts) are in
test_corrupt_state_ends_the_job.py.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_fuzz_helpers import AGENT_RSS_BOUND, WaitingAgents
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from store_fuzz_helpers import LiveStore

from tpelastic.core.rendezvous.keys import RunKeys

pytestmark = pytest.mark.slow
_runs = itertools.count()
SPREAD = 5.0
WITHIN = 75.0  # join timeout 40 s, plus the start of the third agent and the end of the job

KEYS: dict[str, Callable[[RunKeys], str]] = {
    "closed": lambda k: k.closed(),
    "published": lambda k: k.published_rounds(),
    "arrivals": lambda k: k.arrivals(0),
    "slot0": lambda k: k.slot(0, 0),
    "slot1": lambda k: k.slot(0, 1),
    "slot2": lambda k: k.slot(0, 2),
    "result": lambda k: k.result(0),
    "failures": lambda k: k.failures(0),
    "opened": lambda k: k.opened(1),
    "next_result": lambda k: k.result(1),
    "next_arrivals": lambda k: k.arrivals(1),
}

_json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(max_size=20)
)
_json = st.recursive(
    _json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _mutated_record(kind: str, extra: dict[str, object]) -> bytes:
    return json.dumps({"v": 1, "kind": kind, **extra}).encode()


values = st.one_of(
    st.binary(max_size=48),
    st.sampled_from(
        [
            b"",
            b"0",
            b"-1",
            b"1000000000",
            b"9" * 30,
            b"\xff\xfe",
            b"null",
            b"[]",
            b"{}",
            b'{"v": 2, "kind": "closed"}',
            b"x" * 70_000,
        ]
    ),
    _json.map(lambda value: json.dumps(value).encode()),
    st.builds(
        _mutated_record,
        st.sampled_from(["node", "result", "closed", "reason"]),
        st.dictionaries(
            st.sampled_from(["node", "addr", "round", "participants", "outcome", "reason"]),
            _json,
            max_size=4,
        ),
    ),
    st.just(b"copy:slot0"),
    st.just(b"copy:slot1"),
)
writes = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(sorted(KEYS)), values),
    st.tuples(
        st.just("add"),
        st.sampled_from(["arrivals", "published", "failures", "next_arrivals"]),
        st.sampled_from([1, 2, 5000, 10**9, 2**40]),
    ),
)


@settings(
    # CI-sized; TPELASTIC_RECORD_FUZZ_EXAMPLES=50 for a longer search.
    max_examples=int(os.environ.get("TPELASTIC_RECORD_FUZZ_EXAMPLES", "4")),
    deadline=None,
    database=None,
    # No shrinking: each example costs three agents; the first failing one is reported as it is.
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(write=writes)
def test_any_bytes_under_a_key_end_every_agent_cleanly_or_none(  # type: ignore[no-untyped-def]
    tmp_path_factory: pytest.TempPathFactory, live: LiveStore, write
) -> None:
    op, name, value = write
    folder = Path(tmp_path_factory.mktemp("agents"))
    agents = WaitingAgents(folder, f"fuzz-{next(_runs)}", port=live.port)
    key = KEYS[name](agents.keys)
    try:
        agents.start()
        agents.start()
        store = agents.wait_registered(2)
        written = time.monotonic()
        if op == "add":
            store.add(key, value)
        elif isinstance(value, bytes) and value.startswith(b"copy:"):
            source = store.get(KEYS[value.decode()[5:]](agents.keys)) or b""
            store.set(key, source)
        else:
            store.set(key, value)
        store.close()
        agents.start()
        endings = agents.wait_all(written, within=WITHIN)
        leftovers = agents.leftovers()
    finally:
        agents.kill()
    logs = f"{op} {key} {str(value)[:80]}\n{agents.tails()}"
    times = [e.after for e in endings]
    assert all(t is not None for t in times), f"still running {WITHIN} s after: {logs}"
    codes = {e.code for e in endings}
    assert codes == {0} or 0 not in codes, f"some succeeded, some failed: {logs}"
    if codes != {0}:
        assert all(len(e.failed_lines) == 1 for e in endings), logs
        waiting = times[:2]
        assert max(waiting) - min(waiting) <= SPREAD, f"ended at {times}: {logs}"  # type: ignore[type-var, operator]
        lines = [e.failed_lines[0] for e in endings]
        if any("corrupt rendezvous state" in line for line in lines):
            late = [line for line in lines if "(timeout)" in line or "(connection)" in line]
            assert not late, f"the close did not reach every agent: {logs}"
    assert "Traceback" not in logs, logs
    assert agents.peak_rss < AGENT_RSS_BOUND, f"an agent reached {agents.peak_rss} bytes: {logs}"
    assert leftovers == [], leftovers
    assert live.alive(), live.proc.stderr
