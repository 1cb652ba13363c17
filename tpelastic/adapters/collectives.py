"""Worker side: record which collective each rank has entered, without user code changes.

With ``TPELASTIC_COLLECTIVES=1`` (the agent sets it, with a stall timeout, together with the
``sitecustomize`` in :mod:`tpelastic.adapters.boot`), :func:`install` wraps the collectives of
``tensorplay.distributed`` as soon as that package is imported (before user code gets its
names): each call counts one more collective and marks the worker as waiting in the progress
file (:meth:`~tpelastic.adapters.progress.ProgressReporter.entered`) until it returns. When
every rank stops, the one that never reached the collective its peers wait in is the one with
fewer collectives and no wait: the agent names it, on whichever node it runs.

Cost: one ``pwrite`` of 85 bytes on entry and one on exit of each collective; nothing for a
worker without a progress file. Collectives tensorplay calls internally are not counted twice
(only the outermost call counts), so every rank counts the same calls.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

COLLECTIVES_ENV = "TPELASTIC_COLLECTIVES"
TARGET = "tensorplay.distributed"
NAMES = (
    "all_reduce", "broadcast", "barrier", "monitored_barrier", "all_gather",
    "all_gather_into_tensor", "all_gather_object", "reduce_scatter", "reduce_scatter_tensor",
    "reduce", "gather", "scatter", "all_to_all", "all_to_all_single", "broadcast_object_list",
    "gather_object", "scatter_object_list", "send", "recv",
)  # fmt: skip
_depth = threading.local()
_MARK = "__tpelastic_collective__"


def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` that reports entering and leaving collective ``name`` to the progress file."""
    if getattr(fn, _MARK, False):
        return fn

    @functools.wraps(fn)
    def collective(*args: Any, **kwargs: Any) -> Any:
        from tpelastic.adapters import progress

        reporter = progress._current()
        depth = getattr(_depth, "n", 0)
        if reporter is None or depth:
            return fn(*args, **kwargs)
        reporter.entered(name)
        _depth.n = 1
        try:
            return fn(*args, **kwargs)
        finally:
            _depth.n = 0
            reporter.left()

    setattr(collective, _MARK, True)
    return collective


def patch(module: ModuleType) -> list[str]:
    """Wrap the collectives ``module`` has (idempotent); returns their names."""
    done = []
    for name in NAMES:
        fn = getattr(module, name, None)
        if callable(fn):
            setattr(module, name, wrap(name, fn))
            done.append(name)
    return done


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Lets ``tensorplay.distributed`` load as usual, then wraps its collectives."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    """Wrap ``tensorplay.distributed``'s collectives now if it is loaded, else when it is."""
    loaded = sys.modules.get(TARGET)
    if loaded is not None:
        patch(loaded)
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


__all__ = ["COLLECTIVES_ENV", "NAMES", "install", "patch", "wrap"]
