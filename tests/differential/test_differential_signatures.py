"""Every shared public name's signature against torch 2.13's and tensorplay's.

``api_surface.differences`` lists each way a call written for the oracle would fail or bind
differently on ours (a missing name, method or parameter; a parameter that is keyword-only, at
another position, or with another default). The set must equal the rows docs/differences.md keeps
for that oracle: a difference not on the page fails, and so does a row that no longer differs.
"""

from __future__ import annotations

import pytest
from api_surface import SURFACE, differences, documented, import_oracle, undocumented_and_stale


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("root", ["torch", "tensorplay"])
def test_every_signature_difference_is_on_the_differences_page(root: str) -> None:
    if import_oracle(root, "distributed.elastic") is None:
        pytest.skip(f"{root} is not importable here (pip install torch==2.13.0 to compare)")
    found = set(differences(root))
    listed = {key for key in documented(root) if not key.startswith("behaviour:")}
    undocumented, stale = undocumented_and_stale(found, listed)
    assert not undocumented, f"{root}: differences not on docs/differences.md: {undocumented}"
    assert not stale, f"{root}: rows of docs/differences.md that no longer differ: {stale}"


def test_the_surface_names_only_public_names_of_ours() -> None:
    for module, groups in SURFACE.items():
        for _relative, names in groups:
            assert all(not name.startswith("_") for name in names), module
