"""The launcher builds its handler from the registry it is given; the default one is untouched."""

from __future__ import annotations

import pytest

from tpelastic.adapters.launcher.config import ConfigError, LaunchConfig
from tpelastic.adapters.launcher.launch import create_rendezvous_handler
from tpelastic.rendezvous import (
    HandlerRegistry,
    RendezvousHandler,
    RendezvousInfo,
    RendezvousParameters,
    handler_registry,
    rendezvous_handler_registry,
)


class _Handler(RendezvousHandler):
    def __init__(self, params: RendezvousParameters) -> None:
        self.params = params

    def get_backend(self) -> str:
        return self.params.backend

    def get_run_id(self) -> str:
        return self.params.run_id

    def is_closed(self) -> bool:
        return False

    def set_closed(self) -> None:
        pass

    def next_rendezvous(self) -> RendezvousInfo:
        return RendezvousInfo(None, 0, 1)

    def num_nodes_waiting(self) -> int:
        return 0

    def shutdown(self) -> bool:
        return True


def _config() -> LaunchConfig:
    return LaunchConfig(
        min_nodes=1, max_nodes=2, nproc_per_node=1, run_id="given", rdzv_backend="given-only"
    )


def test_the_given_registry_builds_the_handler() -> None:
    registry = HandlerRegistry(entry_point_group=None)
    registry.register("given-only", _Handler)
    handler = create_rendezvous_handler(_config(), registry)
    assert isinstance(handler, _Handler)
    assert handler.params.run_id == "given"
    assert "given-only" not in handler_registry.names()  # nothing leaked into the default


def test_without_one_the_process_registry_is_used() -> None:
    assert rendezvous_handler_registry is handler_registry  # torch's name, the same instance
    with pytest.raises((ConfigError, ValueError), match="given-only"):
        create_rendezvous_handler(_config())
