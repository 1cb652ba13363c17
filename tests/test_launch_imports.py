"""Regression guard for launch overhead (issue 5): what a standalone no-op launch imports.

Not a timed test: it runs the real ``python -m tpelastic.run --standalone`` path (real agent,
real worker processes) and checks *which* modules get imported, in the agent, in a worker
before the user's script, and in the Python shim. Timings are in docs/benchmarks-launcher.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tpelastic.adapters.workers import deathsig

# None of these is needed to launch a standalone job of commands; each costs the agent
# milliseconds to tens of milliseconds at every launch.
HEAVY_IN_AGENT = (
    "transitions",  # only the spec export and the tests build the markup
    "tensorplay",  # a standalone agent keeps its rendezvous state in memory
    "torch",
    "psutil",  # only when a process tree is left to stop
    "prometheus_client",
    "hypothesis",
    "matplotlib",
    "multiprocessing",  # only for callables
    "asyncio",
    "importlib.metadata",  # only for third-party rendezvous backends
    "secrets",
    "uuid",
    # argparse asks shutil for the terminal width, and the default log folder came from
    # tempfile (shutil, random): ~3 ms together; cli.run and workers.logs do both themselves.
    "shutil",
    "tempfile",
    "random",
    "bz2",
    "lzma",
    # The launcher thread's hand-off is a deque and a condition (queue.Queue brought heapq);
    # the error-file reader and the tee pumps only for a failure and for teed output.
    "queue",
    "heapq",
    "tpelastic.adapters.workers.errorfile",
    "tpelastic.adapters.workers.tee",
    "tpelastic.sim",
    "tpelastic.core.sim",
    "tpelastic.adapters.sim",
    "tpelastic.core.export",
    "tpelastic.cli.sim",
    "tpelastic.cli.demo",
    "tpelastic.cli.spec",
    "tpelastic.adapters.sinks.prometheus",
    # With events "null" and no metrics routed nothing is recorded or published, so neither
    # sink is imported (agent.publish drops metrics while sinks.metrics was never imported);
    # the failure report only for failed workers: ~4 ms.
    "tpelastic.adapters.sinks.events",
    "tpelastic.adapters.sinks.metrics",
    "tpelastic.adapters.agent.report",
    # (The worker and worker group machines are imported once the workers run, where the
    # node step steps the current start's group: core.node imports them only then.)
    "tpelastic.adapters.health",
    "tpelastic.adapters.timer",
)

# The worker records what its interpreter had imported before the first line of the script ran.
WORKER = textwrap.dedent(
    """
    import json, os, sys
    with open(os.path.join(os.environ["OUT_DIR"], os.environ["LOCAL_RANK"]), "w") as out:
        json.dump(sorted(sys.modules), out)
    """
)

AGENT = textwrap.dedent(
    """
    import atexit, json, runpy, sys
    sys.argv = ["tpelastic.run", *sys.argv[1:]]
    # The launch ends in os._exit (cli.main.finish), after the atexit handlers: list from one.
    atexit.register(lambda: print("MODULES " + json.dumps(sorted(sys.modules))))
    runpy.run_module("tpelastic.run", run_name="__main__", alter_sys=True)
    """
)


def _loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return [n for n in names if any(m == n or m.startswith(n + ".") for m in modules)]


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("launch")
    script = folder / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "OUT_DIR": str(folder), "TPELASTIC_LOG_LEVEL": "WARNING"}
    argv = ["--standalone", "--nproc-per-node", "2", str(script)]
    done = subprocess.run(
        [sys.executable, "-c", AGENT, *argv], capture_output=True, text=True, env=env, timeout=60
    )
    line = [x for x in done.stdout.splitlines() if x.startswith("MODULES ")]
    assert line, done.stderr[-2000:]
    agent = json.loads(line[0][len("MODULES ") :])
    workers = [json.loads((folder / str(rank)).read_text()) for rank in (0, 1)]
    return {"code": done.returncode, "agent": agent, "workers": workers}


def test_the_job_ran(launch):
    assert launch["code"] == 0


def test_the_agent_imports_nothing_heavy(launch):
    agent = launch["agent"]
    assert "tpelastic.adapters.agent.local" in agent  # it did launch through the agent
    assert _loaded(agent, HEAVY_IN_AGENT) == []


def test_a_worker_imports_nothing_of_ours_before_its_script(launch):
    bare = subprocess.run(
        [sys.executable, "-c", "import json, sys; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    baseline = set(json.loads(bare.stdout))
    for modules in launch["workers"]:
        assert [m for m in modules if m.startswith("tpelastic")] == []
        # Nothing beyond what a bare interpreter running ``-c`` has (and json, which the
        # worker itself imported to write its list).
        extra = {m for m in set(modules) - baseline if not m.startswith(("json", "_json"))}
        assert extra <= {"__mp_main__", "_bootlocale"}, sorted(extra)


def test_the_python_shim_imports_only_the_standard_library_it_needs():
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-I", "-S", deathsig.SHIM, str(os.getpid())]
        + ["--", "true"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0  # armed the signal, saw its parent alive, exec'd ``true``
    imported = [
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line and "imported package" not in line
    ]
    assert imported, done.stderr[-2000:]
    assert [m for m in imported if m.startswith("tpelastic")] == []
    assert _loaded(imported, HEAVY_IN_AGENT + ("logging", "subprocess", "threading")) == []


def test_collection_is_paused_only_for_the_imports_of_a_launch(tmp_path):
    script = tmp_path / "noop.py"
    script.write_text("pass\n")
    code = textwrap.dedent(
        f"""
        import gc
        import tpelastic.run  # imported as a library: the collector stays on
        assert gc.isenabled()
        gc.disable()  # what the entry points do before importing the launch path
        from tpelastic.cli.run import main
        code = main(["--standalone", "--nproc-per-node", "1", {str(script)!r}])
        print(code, gc.isenabled(), gc.get_freeze_count() > 0)
        """
    )
    env = {**os.environ, "TPELASTIC_LOG_LEVEL": "WARNING"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.stdout.split() == ["0", "True", "True"], done.stderr[-2000:]


def test_agent_metrics_reach_a_handler_once_one_is_routed_and_import_nothing_before():
    # agent.publish drops metrics while sinks.metrics was never imported (nothing can route
    # them then); a fresh interpreter shows both sides of that check.
    code = textwrap.dedent(
        """
        import sys
        from tpelastic.adapters.agent.publish import EXIT, Publisher
        publish = Publisher()
        publish.workers(HEALTHY=2)
        publish.failure(EXIT)
        print("before", "tpelastic.adapters.sinks.metrics" in sys.modules)
        from tpelastic.adapters.sinks import metrics
        seen = []
        class Keep:
            def emit(self, data):
                seen.append((data.group, data.name, data.value))
        metrics.configure(Keep())
        publish.failure(EXIT)
        publish.workers(HEALTHY=2)
        print("after", seen[0], len(seen), dict((n, v) for _, n, v in seen)["workers.HEALTHY"])
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.stdout.splitlines() == [
        "before False",
        "after ('tpelastic', 'failures.exit', 1.0) 8 2.0",
    ], done.stderr[-2000:]
