"""The shipped harness's agent fences as the product does: on a lapsed keep-alive it stops and
waits until a heartbeat lands again (KeepAliveRestored), judged by the membership core."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.core.membership import MemberConfig
from tpelastic.testing.handler_agent import Agent
from tpelastic.testing.handler_spec import AgentSpec

SPEC = AgentSpec(slot=0, min_nodes=1, max_nodes=2, options={})


class OwnBeats:
    """A handler whose keep-alive the test sets: a real heartbeat cannot be held back without
    pausing the process that asserts on it. The rest is a round-aware handler with nothing new."""

    def __init__(self, config: MemberConfig) -> None:
        self.beat = SYSTEM_CLOCK.now()
        self.config = config

    def keep_alive_last_beat(self) -> float:
        return self.beat

    def member_config(self) -> MemberConfig:
        return self.config

    def watch(self) -> Any:
        return SimpleNamespace(closed=None, next_opened=None, waiting=0)


def events(out: str) -> list[str]:
    return [json.loads(line)["event"] for line in out.splitlines() if line.startswith("{")]


CONFIG = MemberConfig(heartbeat_timeout=0.6, heartbeat_interval=0.2, fence_timeout=30.0)


def test_a_lapsed_agent_fences_and_rejoins_only_once_a_beat_lands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    handler = OwnBeats(CONFIG)
    agent = Agent(handler, SPEC, poll=0.02)  # type: ignore[arg-type]
    handler.beat = SYSTEM_CLOCK.now() - 1.0  # lapsed: older than timeout - interval
    landed: list[float] = []

    def land() -> None:
        landed.append(SYSTEM_CLOCK.now())
        handler.beat = SYSTEM_CLOCK.now()

    timer = threading.Timer(0.5, land)
    timer.start()
    try:
        why = agent.train()
    finally:
        timer.cancel()
    assert why == "membership"
    assert landed  # it waited, fenced, for the beat
    assert events(capsys.readouterr().out) == ["fenced", "restored"]


HOST = MemberConfig(heartbeat_timeout=0.6, heartbeat_interval=0.2, hosts_store=True)


@pytest.mark.parametrize("config", [MemberConfig(), HOST], ids=["no heartbeat", "store host"])
def test_the_store_host_and_a_handler_without_a_heartbeat_never_fence(
    config: MemberConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    handler = OwnBeats(config)
    agent = Agent(handler, SPEC, poll=0.02)  # type: ignore[arg-type]
    handler.beat = SYSTEM_CLOCK.now() - 100.0
    threading.Timer(0.3, agent.commands.put, args=("leave",)).start()
    assert agent.train() == "leave"
    assert "fenced" not in events(capsys.readouterr().out)
