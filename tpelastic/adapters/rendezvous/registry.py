"""HandlerRegistry: backend name -> handler factory, extensible through entry points.

A registry is a plain object; nothing here is a process-wide singleton. The public face
(``tpelastic.rendezvous``) keeps one default instance built by :func:`builtin_registry`.

Third parties add backends through the entry-point group ``tpelastic.rendezvous_backends``:
the entry point's name is the backend name and it loads to a factory
``(RendezvousParameters) -> RendezvousHandler``. Entry points are read only when a name is asked
for that is not registered, so a broken third-party package cannot break the built-in backends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from tpelastic.adapters.rendezvous.errors import RendezvousError
from tpelastic.adapters.rendezvous.handler import RendezvousHandler
from tpelastic.adapters.rendezvous.parameters import RendezvousParameters

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

ENTRY_POINT_GROUP = "tpelastic.rendezvous_backends"

HandlerFactory = Callable[[RendezvousParameters], RendezvousHandler]


class HandlerRegistry:
    """Maps backend names (and their aliases) to handler factories (torch's
    ``RendezvousHandlerRegistry``, plus aliases, entry points and :meth:`names`)."""

    def __init__(self, entry_point_group: str | None = ENTRY_POINT_GROUP) -> None:
        self._factories: dict[str, HandlerFactory] = {}
        self._group = entry_point_group

    def register(self, backend: str, creator: HandlerFactory, aliases: Iterable[str] = ()) -> None:
        """Register ``creator`` under the name ``backend`` and each alias (torch's arguments).

        Registering the same creator again under a name is a no-op, as torch's.

        Raises:
            ValueError: a name is empty or already registered to another creator (nothing is
                registered then).
        """
        names = [backend, *aliases]
        for each in names:
            if not each or not isinstance(each, str):
                raise ValueError(f"a rendezvous backend name must be a non-empty string: {each!r}")
            if self._factories.get(each, creator) is not creator:
                raise ValueError(f"rendezvous backend {each!r} is already registered")
        for each in names:
            self._factories[each] = creator

    def names(self) -> list[str]:
        """The registered backend names and aliases, sorted."""
        return sorted(self._factories)

    def __contains__(self, name: object) -> bool:
        return name in self._factories

    def factory(self, name: str) -> HandlerFactory:
        """The factory for ``name``, loading it from an entry point if it is not registered.

        Raises:
            ValueError: no backend of that name, registered or installed; the message lists
                the known names.
            RendezvousError: an entry point of that name exists but fails to load.
        """
        if name not in self._factories:
            point = self._entry_point(name)
            if point is None:
                known = ", ".join(self.names()) or "none"
                raise ValueError(f"unknown rendezvous backend {name!r} (known: {known})")
            self._factories[name] = _load(point)
        return self._factories[name]

    def create_handler(self, params: RendezvousParameters) -> RendezvousHandler:
        """Build the handler for ``params.backend``.

        Raises:
            ValueError: unknown backend, or bad parameters for it.
            RendezvousError: the backend's entry point fails to load, or the factory returned
                something that is not a RendezvousHandler.
        """
        handler = self.factory(params.backend)(params)
        if not isinstance(handler, RendezvousHandler):
            raise RendezvousError(
                f"rendezvous backend {params.backend!r} returned {type(handler).__name__}, "
                "not a RendezvousHandler"
            )
        return handler

    def _entry_point(self, name: str) -> EntryPoint | None:
        if self._group is None:
            return None
        # Imported here: importlib.metadata is slow to import, and only a name that is not
        # built in (a third-party backend) is ever looked up among the entry points.
        from importlib.metadata import entry_points

        matches = list(entry_points(group=self._group, name=name))
        return matches[0] if matches else None


def _load(point: EntryPoint) -> HandlerFactory:
    try:
        factory = point.load()
    except Exception as error:  # any import failure becomes one line
        raise RendezvousError(
            f"rendezvous backend {point.name!r} (entry point {point.value}) failed to load: "
            f"{type(error).__name__}: {error}"
        ) from error
    if not callable(factory):
        raise RendezvousError(
            f"rendezvous backend {point.name!r} (entry point {point.value}) is not callable"
        )
    return factory  # type: ignore[no-any-return]


RendezvousHandlerRegistry = HandlerRegistry


def builtin_registry() -> HandlerRegistry:
    """A new registry holding the built-in backends: ``static``, ``tcp`` (aliases ``c10d`` and
    ``p10d``), ``file`` and ``etcd``."""
    from tpelastic.adapters.rendezvous.dynamic_factory import create_dynamic_handler
    from tpelastic.adapters.rendezvous.etcd_factory import create_etcd_handler
    from tpelastic.adapters.rendezvous.static import create_static_handler

    registry = HandlerRegistry()
    registry.register("static", create_static_handler)
    registry.register("tcp", create_dynamic_handler, aliases=("c10d", "p10d"))
    registry.register("file", create_dynamic_handler)
    registry.register("etcd", create_etcd_handler)
    return registry


__all__ = [
    "ENTRY_POINT_GROUP",
    "HandlerFactory",
    "HandlerRegistry",
    "RendezvousHandlerRegistry",
    "builtin_registry",
]
