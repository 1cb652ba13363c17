"""No adapter, CLI or harness module reads the time but through the Clock port.

The scan is over the syntax tree: a call, or a reference passed on as a default or a factory
(``field(factory=time.time)``), of the time and datetime functions below, under any alias the
module imports them by. ``tpelastic/adapters/clock.py`` is the one place allowed to read them.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2] / "tpelastic"
SCANNED = ("adapters", "cli", "testing")
READS = {
    ("time", "monotonic"),
    ("time", "monotonic_ns"),
    ("time", "time"),
    ("time", "time_ns"),
    ("time", "sleep"),
    ("time", "perf_counter"),
    ("time", "perf_counter_ns"),
    ("datetime", "now"),
    ("datetime", "utcnow"),
    ("datetime", "today"),
    ("date", "today"),
}
# Module (relative to tpelastic/) -> why it may read the time directly. Keep it short.
ALLOWED = {
    "adapters/clock.py": "the Clock adapter itself",
}


def clock_reads(source: str) -> list[tuple[int, str]]:
    """(line, name) of every direct time read in ``source``."""
    tree = ast.parse(source)
    modules: dict[str, str] = {}  # local name -> "time" / "datetime" (the module or its class)
    functions: dict[str, tuple[str, str]] = {}  # local name -> (owner, function)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ("time", "datetime"):
                    modules[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module in ("time", "datetime"):
            for alias in node.names:
                local = alias.asname or alias.name
                if node.module == "datetime" and alias.name in ("datetime", "date"):
                    modules[local] = alias.name
                else:
                    functions[local] = (node.module, alias.name)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            owner = _owner(node.value, modules)
            if owner is not None and (owner, node.attr) in READS:
                found.append((node.lineno, f"{owner}.{node.attr}"))
        elif isinstance(node, ast.Name) and node.id in functions:
            if functions[node.id] in READS and not isinstance(node.ctx, ast.Store):
                found.append((node.lineno, ".".join(functions[node.id])))
    return sorted(found)


def _owner(value: ast.expr, modules: dict[str, str]) -> str | None:
    if isinstance(value, ast.Name):
        return modules.get(value.id)
    # datetime.datetime.now / datetime.date.today
    if (
        isinstance(value, ast.Attribute)
        and isinstance(value.value, ast.Name)
        and modules.get(value.value.id) == "datetime"
        and value.attr in ("datetime", "date")
    ):
        return value.attr
    return None


def _modules() -> list[pathlib.Path]:
    return sorted(p for part in SCANNED for p in (ROOT / part).rglob("*.py"))


def test_no_module_reads_the_clock_directly() -> None:
    offenders = []
    for path in _modules():
        name = path.relative_to(ROOT).as_posix()
        if name in ALLOWED:
            continue
        for line, call in clock_reads(path.read_text()):
            offenders.append(f"tpelastic/{name}:{line}: {call}")
    assert not offenders, "read the time through the Clock port:\n" + "\n".join(offenders)


def test_every_allowed_module_exists_and_reads_the_clock() -> None:
    for name in ALLOWED:
        assert clock_reads((ROOT / name).read_text()), f"{name} no longer needs its exemption"


@pytest.mark.parametrize(
    "source",
    [
        "import time\ntime.monotonic()",
        "import time as t\nt.sleep(1)",
        "from time import monotonic as now\nnow()",
        "from time import perf_counter\nx = perf_counter",
        "import datetime\ndatetime.datetime.now()",
        "from datetime import datetime\ndatetime.now()",
        "import attrs, time\nattrs.field(factory=time.time)",
    ],
)
def test_the_scan_finds_each_way_of_reading_the_time(source: str) -> None:
    assert clock_reads(source)


def test_the_scan_leaves_durations_and_other_modules_alone() -> None:
    assert not clock_reads("import datetime\ndatetime.timedelta(seconds=1)")
    assert not clock_reads("import time\ntime.strftime('%H')")
    assert not clock_reads("clock.now()\nclock.sleep(1)")
