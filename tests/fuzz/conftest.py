"""A live store server per module (helpers in store_fuzz_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from store_fuzz_helpers import LiveStore


@pytest.fixture(scope="module")
def live() -> Iterator[LiveStore]:
    served = LiveStore()
    yield served
    err = served.stop()
    assert "Traceback" not in err, err
