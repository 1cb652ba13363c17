"""torchrun's worker flags, run for real: duplicate filters, virtual local rank, NUMA binding
and a ``--logs-specs`` plugin found through its ``torchrun.logs_specs`` entry point."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from e2e_helpers import launcher_env, run_cmd, tprun

from tpelastic.adapters.workers.numa import binding

PLACEMENT = str(Path(__file__).resolve().parent / "scripts" / "report_placement.py")


def _placements(out: Path) -> dict[int, dict[str, object]]:
    found = [json.loads(p.read_text()) for p in out.glob("rank*.json")]
    return {r["rank"]: r for r in found}


def test_duplicate_filters_copy_matching_teed_lines_to_the_attempt_files(tmp_path: Path) -> None:
    out, logs = tmp_path / "out", tmp_path / "logs"
    out.mkdir()
    done = tprun(
        "--standalone",
        "--nproc-per-node",
        "2",
        "--tee",
        "3",
        "--log-dir",
        str(logs),
        "--duplicate-stdout-filters",
        "apple,orange,, juice",
        "--duplicate-stderr-filters",
        "oops",
        PLACEMENT,
        str(out),
    )
    assert done.returncode == 0, done.stderr
    (attempt,) = logs.glob("*/attempt_*")
    copied = (attempt / "filtered_stdout.log").read_text().splitlines()
    assert (
        sorted(line.split(":", 1)[1] for line in copied)
        == ["apple pie"] * 2 + ["orange, juice"] * 2
    )  # "banana split" holds no filter; ",," is a comma inside "orange, juice"
    assert {line.split(":", 1)[0] for line in copied} == {"[default0|rank0]", "[default1|rank1]"}
    errors = (attempt / "filtered_stderr.log").read_text().splitlines()
    assert sorted(errors) == ["[default0|rank0]:oops on stderr", "[default1|rank1]:oops on stderr"]
    assert "banana split" in done.stdout  # the console is unchanged


def test_virtual_local_rank_and_numa_binding_place_each_worker(tmp_path: Path) -> None:
    allowed = os.sched_getaffinity(0)
    try:
        expected = binding("exclusive", 2)
    except RuntimeError:
        pytest.skip(f"fewer than two physical cores allowed here ({sorted(allowed)})")
    out = tmp_path / "out"
    out.mkdir()
    done = tprun(
        "--standalone",
        "--nproc-per-node",
        "2",
        "--virtual-local-rank",
        "--numa-binding",
        "exclusive",
        PLACEMENT,
        str(out),
    )
    assert done.returncode == 0, done.stderr
    seen = _placements(out)
    assert [seen[r]["LOCAL_RANK"] for r in (0, 1)] == ["0", "0"]
    assert [seen[r]["TPELASTIC_LOCAL_RANK"] for r in (0, 1)] == ["0", "1"]
    assert [seen[r]["CUDA_VISIBLE_DEVICES"] for r in (0, 1)] == ["0", "1"]
    assert [set(seen[r]["cpus"]) for r in (0, 1)] == [set(expected[0]), set(expected[1])]
    assert not set(expected[0]) & set(expected[1])  # exclusive: no CPU shared


_PLUGIN = """
import os
from tpelastic.multiprocessing import LogsSpecs


class FlatLogsSpecs(LogsSpecs):
    '''Every attempt's files directly in log_dir/flat_<restart count>.'''

    def reify(self, envs):
        dest = super().reify(envs)
        flat = os.path.join(self.log_dir, "flat_" + envs[0]["TORCHELASTIC_RESTART_COUNT"])
        os.rename(dest.attempt_dir, flat)
        for table in (dest.stdouts, dest.stderrs, dest.tee_stdouts, dest.tee_stderrs,
                      dest.error_files):
            for rank, path in table.items():
                table[rank] = path.replace(dest.attempt_dir, flat)
        dest.attempt_dir = flat
        return dest
"""


def _install_plugin(site: Path) -> None:
    site.mkdir()
    (site / "flat_logs.py").write_text(textwrap.dedent(_PLUGIN))
    info = site / "flat_logs-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flat-logs\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[torchrun.logs_specs]\nflat = flat_logs:FlatLogsSpecs\n"
    )


def test_logs_specs_name_loads_the_entry_point_and_an_unknown_name_is_one_line(
    tmp_path: Path,
) -> None:
    site, logs, out = tmp_path / "site", tmp_path / "logs", tmp_path / "out"
    _install_plugin(site)
    out.mkdir()
    env = launcher_env()
    env["PYTHONPATH"] = f"{site}{os.pathsep}{env['PYTHONPATH']}"
    args = ["--standalone", "--nproc-per-node", "2", "--redirects", "3", "--log-dir", str(logs)]

    def run(name: str) -> subprocess.CompletedProcess[str]:
        command = run_cmd(*args, "--logs-specs", name, PLACEMENT, str(out))
        return subprocess.run(command, capture_output=True, text=True, timeout=90, env=env)

    done = run("flat")
    assert done.returncode == 0, done.stderr
    assert (logs / "flat_0" / "1" / "stdout.log").read_text().startswith("apple pie")
    assert "oops on stderr" in (logs / "flat_0" / "0" / "stderr.log").read_text()
    unknown = run("nosuch")
    assert unknown.returncode == 2
    assert unknown.stderr.splitlines() == [
        "tpelastic run: error: --logs-specs 'nosuch': no entry point "
        "torchrun.logs_specs[nosuch] is installed"
    ]
