"""HandlerRegistry: names, aliases, entry points (a real dist-info on sys.path), errors."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from tpelastic.rendezvous import (
    ENTRY_POINT_GROUP,
    HandlerRegistry,
    RendezvousError,
    RendezvousHandler,
    RendezvousInfo,
    RendezvousParameters,
    builtin_registry,
    create_handler,
    handler_registry,
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


def _params(backend: str) -> RendezvousParameters:
    return RendezvousParameters(backend, "localhost:29400", "run", 1, 1, rank=0)


def test_register_with_aliases_and_create() -> None:
    registry = HandlerRegistry(entry_point_group=None)
    registry.register("mine", _Handler, aliases=("also-mine",))
    assert registry.names() == ["also-mine", "mine"]
    handler = registry.create_handler(_params("also-mine"))
    assert isinstance(handler, _Handler)
    assert handler.get_backend() == "also-mine"
    assert handler.use_agent_store is False
    handler.pre_shutdown()  # the default hook is a no-op


def test_duplicate_names_are_refused_atomically() -> None:
    registry = HandlerRegistry(entry_point_group=None)
    registry.register("a", _Handler)
    with pytest.raises(ValueError, match="rendezvous backend 'a' is already registered"):
        registry.register("b", lambda params: _Handler(params), aliases=("a",))
    assert "b" not in registry
    with pytest.raises(ValueError, match="must be a non-empty string"):
        registry.register("", _Handler)


def test_unknown_name_is_one_line_listing_known_names() -> None:
    registry = builtin_registry()
    registry.register("zeta", _Handler)
    with pytest.raises(ValueError) as caught:
        registry.create_handler(_params("nope"))
    assert (
        str(caught.value)
        == "unknown rendezvous backend 'nope' (known: c10d, etcd, file, p10d, static, tcp, zeta)"
    )


def test_default_registry_and_create_handler() -> None:
    assert "static" in handler_registry.names()
    handler = create_handler(_params("static"))
    assert handler.get_backend() == "static"
    assert handler.get_run_id() == "run"
    assert handler.num_nodes_waiting() == 0
    handler.shutdown()


def test_registries_are_independent() -> None:
    one, two = builtin_registry(), builtin_registry()
    one.register("only-in-one", _Handler)
    assert "only-in-one" not in two


def test_factory_must_return_a_handler() -> None:
    registry = HandlerRegistry(entry_point_group=None)
    registry.register("bad", lambda params: object())  # type: ignore[arg-type,return-value]
    with pytest.raises(RendezvousError, match="returned object, not a RendezvousHandler"):
        registry.create_handler(_params("bad"))


@pytest.fixture
def installed_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A real (tiny) installed distribution declaring entry points, found via sys.path."""
    module = tmp_path / "tpe_plugin_demo.py"
    module.write_text(
        textwrap.dedent(
            """
            import test_rdzv_registry as tests

            LOADS = []

            def factory(params):
                LOADS.append(params.backend)
                return tests._Handler(params)

            not_a_function = 42
            """
        )
    )
    info = tmp_path / "tpe_plugin_demo-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tpe-plugin-demo\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n"
        "demo = tpe_plugin_demo:factory\n"
        "broken = tpe_plugin_missing_module:factory\n"
        "notcallable = tpe_plugin_demo:not_a_function\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tpe_plugin_demo", raising=False)
    return tmp_path


def test_entry_point_is_loaded_only_when_asked(installed_plugin: Path) -> None:
    registry = builtin_registry()
    assert "demo" not in registry.names()  # not loaded eagerly
    handler = registry.create_handler(_params("demo"))
    assert isinstance(handler, _Handler)
    assert registry.names() == ["c10d", "demo", "etcd", "file", "p10d", "static", "tcp"]
    assert sys.modules["tpe_plugin_demo"].LOADS == ["demo"]


def test_failing_entry_point_is_one_line(installed_plugin: Path) -> None:
    registry = builtin_registry()
    with pytest.raises(RendezvousError) as caught:
        registry.create_handler(_params("broken"))
    message = str(caught.value)
    assert message.startswith("rendezvous backend 'broken' (entry point tpe_plugin_missing_module")
    assert "ModuleNotFoundError" in message
    assert "\n" not in message
    with pytest.raises(RendezvousError, match="'notcallable'.*is not callable"):
        registry.create_handler(_params("notcallable"))
    # The built-ins still work after a broken plugin.
    registry.create_handler(_params("static")).shutdown()
