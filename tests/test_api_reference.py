"""The generated API reference builds (pdoc, from the docstrings of the public modules) and
``help(tpelastic)`` lists the public names."""

from __future__ import annotations

import pydoc
import subprocess
import sys
from pathlib import Path

import pytest

import tpelastic

pytest.importorskip("pdoc")  # in the test extra; CI installs it

PUBLIC = (
    "tpelastic", "tpelastic.launcher", "tpelastic.agent", "tpelastic.rendezvous",
    "tpelastic.multiprocessing", "tpelastic.errors", "tpelastic.data", "tpelastic.events",
    "tpelastic.metrics", "tpelastic.timer", "tpelastic.sim", "tpelastic.testing",
)  # fmt: skip
EXPECTED = {
    "tpelastic/launcher.html": ("LaunchConfig", "elastic_launch", "launch_agent"),
    "tpelastic/agent.html": ("WorkerSpec", "LocalElasticAgent"),
    "tpelastic/metrics.html": ("PrometheusMetricHandler", "put_metric"),
    "tpelastic/timer.html": ("expires", "ProgressWatch"),
}


def test_api_reference_builds(tmp_path: Path) -> None:
    out = tmp_path / "api"
    done = subprocess.run(
        [sys.executable, "-m", "pdoc", "-o", str(out), *PUBLIC],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (out / "index.html").exists()
    for module in PUBLIC[1:]:
        assert (out / (module.replace(".", "/") + ".html")).exists(), module
    for page, names in EXPECTED.items():
        text = (out / page).read_text()
        for name in names:
            assert f'id="{name}"' in text, (page, name)


def test_help_lists_the_public_names() -> None:
    text = pydoc.render_doc(tpelastic, renderer=pydoc.plaintext)
    for name in tpelastic.__all__:
        if name != "__version__":
            assert name in text, name
    assert set(tpelastic.__all__) <= set(dir(tpelastic))
