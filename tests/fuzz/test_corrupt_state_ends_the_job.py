"""Corrupt rendezvous state ends the job for every agent, each with one line, within seconds of
the first (specs/agent.md A14): the agent that finds it closes the run with the reason, so the
others need not read the damaged key themselves. Real agents waiting with ``--nnodes 3`` on a
store the first of them hosts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from agent_fuzz_helpers import WaitingAgents

from tpelastic.adapters.stores.tcp_client import TcpStoreClient

pytestmark = pytest.mark.slow
SPREAD = 5.0  # every agent ends at most this long after the first


def _garbage_closed(agents: WaitingAgents, store: TcpStoreClient) -> None:
    store.set(agents.keys.closed(), b"\xff not a record")


def _garbage_published(agents: WaitingAgents, store: TcpStoreClient) -> None:
    store.set(agents.keys.published_rounds(), b"{garbage")


def _copied_slot(agents: WaitingAgents, store: TcpStoreClient) -> None:
    store.set(agents.keys.slot(0, 1), store.get(agents.keys.slot(0, 0)) or b"")


@pytest.mark.parametrize(
    ("damage", "third", "key"),
    [
        # The host, the closer, reads it at its next look; its peer waits on the result key.
        (_garbage_closed, False, "closed"),
        # Only a newcomer reads `published`: it alone finds it, and the waiting two must learn.
        (_garbage_published, True, "published"),
        # The closer finds the copy when the third node makes the round ready to close.
        (_copied_slot, True, "r0/slot/1"),
    ],
    ids=["closed", "published-newcomer", "copied-slot"],
)
def test_corrupt_state_ends_every_agent_with_one_line(  # type: ignore[no-untyped-def]
    tmp_path: Path, damage, third: bool, key: str
) -> None:
    agents = WaitingAgents(tmp_path, "corrupt")
    try:
        agents.start()
        agents.start()
        store = agents.wait_registered(2)
        written = time.monotonic()
        damage(agents, store)
        store.close()
        if third:
            agents.start()
        endings = agents.wait_all(written, within=60.0)
        leftovers = agents.leftovers()
    finally:
        agents.kill()
    logs = agents.tails()
    times = [e.after for e in endings]
    assert all(t is not None for t in times), f"still running 60 s after the write: {logs}"
    assert max(times) - min(times) <= SPREAD, f"ended at {times}: {logs}"  # type: ignore[type-var, operator]
    assert all(e.code not in (None, 0) for e in endings), logs
    assert all(len(e.failed_lines) == 1 for e in endings), logs
    assert "Traceback" not in logs, logs
    named = f"corrupt rendezvous state at 'tpelastic/v1/corrupt/{key}'"
    assert all(named in e.failed_lines[0] for e in endings), logs  # each line says why
    assert leftovers == [], leftovers
