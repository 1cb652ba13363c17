"""specs/ stays true: generated tables match the code, and every invariant names a real test."""

from __future__ import annotations

import re
from pathlib import Path

from tpelastic.cli.spec import stale_files
from tpelastic.core.machines import all_tables

REPO = Path(__file__).resolve().parent.parent
SPECS = REPO / "specs"
# An invariant row: | R1 | safety | statement | `tests/...py::...::name` |
ROW = re.compile(r"^\|\s*([A-Z]\d+)\s*\|\s*(safety|liveness)\s*\|(.+?)\|\s*`([^`]+)`\s*\|\s*$")
TEST_NAME = re.compile(r"def ((?:inv|test)_([A-Z]\d+)_\w*)\(")


def invariants() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted(SPECS.glob("*.md")):
        for line in path.read_text().splitlines():
            match = ROW.match(line)
            if match:
                ident, _kind, _text, test = match.groups()
                assert ident not in found, f"invariant {ident} is declared twice"
                found[ident] = test
    return found


def test_generated_tables_are_current() -> None:
    assert stale_files(SPECS / "tables") == [], "run `tpelastic spec --write`"


def test_every_machine_has_a_prose_spec() -> None:
    for table in all_tables():
        assert (SPECS / f"{table.name}.md").is_file(), f"specs/{table.name}.md is missing"


def test_every_invariant_names_an_existing_test() -> None:
    declared = invariants()
    assert declared, "specs/ declares no invariants"
    for ident, test in declared.items():
        path, _, rest = test.partition("::")
        name = rest.split("::")[-1]
        assert name, f"{ident}: test id {test!r} has no function name"
        source = (REPO / path).read_text() if (REPO / path).is_file() else ""
        assert f"def {name}(" in source, f"{ident}: {test} does not exist"
        assert ident in name, f"{ident}: the test's name {name} should carry the invariant id"


def test_every_invariant_test_names_a_declared_invariant() -> None:
    declared = invariants()
    for path in (REPO / "tests").rglob("test_*.py"):
        for name, ident in TEST_NAME.findall(path.read_text()):
            if ident in declared:
                continue
            raise AssertionError(f"{path.name}::{name} names invariant {ident}, not in specs/")
