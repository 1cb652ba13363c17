"""Read a simulation scenario from a TOML or JSON file (the core takes the parsed value)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from tpelastic.core.sim.scenario import Scenario, ScenarioError, scenario_from_dict

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML through the tomli backport
    import tomli as tomllib


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    """The scenario in ``path``: TOML (``.toml``) or JSON (``.json``).

    Raises:
        ScenarioError: one line naming the file and the problem (unreadable file, bad syntax,
            unknown key or bad value).
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as fh:
            raw = fh.read()
    except OSError as error:
        raise ScenarioError(f"{name}: cannot read the scenario: {error.strerror}") from None
    data = _parse(name, raw)
    try:
        return scenario_from_dict(data)
    except ScenarioError as error:
        raise ScenarioError(f"{name}: {error}") from None


def _parse(name: str, raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
        if name.endswith(".json"):
            data = json.loads(text)
        elif name.endswith(".toml"):
            data = tomllib.loads(text)
        else:
            raise ScenarioError(f"{name}: a scenario file must end in .toml or .json")
    except (UnicodeDecodeError, ValueError) as error:
        if isinstance(error, ScenarioError):
            raise
        detail = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ScenarioError(f"{name}: not valid {name.rsplit('.', 1)[-1]}: {detail}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{name}: a scenario must be a table/object at the top")
    return data
