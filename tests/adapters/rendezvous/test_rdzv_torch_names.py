"""torch's rendezvous names on our handler: from_backend, C10dRendezvousBackend, the registry."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tpelastic.adapters.stores.memory import MemoryStore
from tpelastic.rendezvous import (
    C10dRendezvousBackend,
    DynamicRendezvousHandler,
    RendezvousHandlerRegistry,
    RendezvousParameters,
    RendezvousTimeout,
    rendezvous_handler_registry,
)


def test_from_backend_forms_a_one_node_world_over_a_c10d_backend() -> None:
    backend = C10dRendezvousBackend(MemoryStore(), "job")
    handler = DynamicRendezvousHandler.from_backend(
        "job", None, backend, 1, 1, timeout=RendezvousTimeout(timedelta(seconds=20))
    )
    try:
        assert (handler.get_backend(), handler.get_run_id()) == ("c10d", "job")
        info = handler.next_rendezvous()
        assert (info.rank, info.world_size) == (0, 1)
        assert handler.settings.config.join_timeout == 20
    finally:
        handler.shutdown()


def test_c10d_backend_wraps_a_tensorplay_store(tmp_path) -> None:
    from tensorplay.distributed import FileStore

    backend = C10dRendezvousBackend(FileStore(str(tmp_path / "store"), 1), "job")
    backend.set("k", b"v")
    assert backend.get("k") == b"v"
    assert (backend.name, backend.run_id) == ("c10d", "job")


def test_registry_takes_torchs_arguments() -> None:
    registry = RendezvousHandlerRegistry()

    def creator(params: RendezvousParameters):  # pragma: no cover - never called
        raise AssertionError

    registry.register(backend="mine", creator=creator)
    registry.register("mine", creator)  # the same creator again: a no-op, as torch's
    with pytest.raises(ValueError, match="already registered"):
        registry.register("mine", lambda params: None)  # type: ignore[arg-type,return-value]
    assert "static" in rendezvous_handler_registry
