"""Fixtures for the end-to-end tests (helpers are in e2e_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def out(tmp_path: Path) -> Path:
    folder = tmp_path / "records"
    folder.mkdir()
    return folder
