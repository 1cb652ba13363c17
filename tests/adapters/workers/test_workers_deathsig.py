"""The parent-death prefix (setpriv + sh, or the Python shim): real processes, no mocks."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest
from conftest import alive, wait_gone

from tpelastic.adapters.workers import deathsig

needs_setpriv = pytest.mark.skipif(
    deathsig.usable_setpriv() is None, reason="setpriv with --pdeathsig is not installed here"
)


def _orphan_check(prefix_code: str) -> None:
    """A helper process starts ``sleep 60`` behind the prefix, then is SIGKILLed: the child
    must die with it and must have kept the pid it was started with (every step execs)."""
    helper = (
        "import os, subprocess, sys, time\n"
        "from tpelastic.adapters.workers import deathsig\n"
        f"c = subprocess.Popen([*{prefix_code}, sys.executable, '-c',"
        " 'import time; time.sleep(60)'], start_new_session=True)\n"
        "print(c.pid, flush=True); time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", helper], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + 10
        while "time.sleep(60)" not in " ".join(psutil.Process(child).cmdline()):
            assert time.monotonic() < deadline, "the prefix never exec'd the command"
            time.sleep(0.02)
        assert alive([child]) == [child]
    finally:
        parent.kill()
        parent.wait(timeout=10)
        parent.stdout.close()
    assert wait_gone([child], timeout=2) == []


@needs_setpriv
def test_setpriv_prefix_arms_the_parent_death_signal():
    _orphan_check("deathsig.prefix(os.getpid())")


def test_python_shim_prefix_arms_the_parent_death_signal():
    _orphan_check("[sys.executable, '-I', '-S', deathsig.SHIM, str(os.getpid()), '--']")


@needs_setpriv
def test_setpriv_prefix_refuses_to_run_when_the_agent_is_not_the_parent(tmp_path):
    marker = tmp_path / "ran"
    not_parent = 1  # init: never this test's pid
    argv = [*deathsig.prefix(not_parent), "touch", str(marker)]
    done = subprocess.run(argv, capture_output=True, timeout=10)
    assert done.returncode == 1 and not marker.exists()


@needs_setpriv
def test_setpriv_prefix_passes_arguments_through_untouched(tmp_path):
    args = ["-x", "two words", "$HOME", "'quoted'", ""]
    code = "import sys; print(repr(sys.argv[1:]))"
    argv = [*deathsig.prefix(os.getpid()), sys.executable, "-c", code, *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    assert done.returncode == 0 and done.stdout.strip() == repr(args)


@needs_setpriv
def test_setpriv_prefix_reports_a_missing_command_like_a_shell():
    argv = [*deathsig.prefix(os.getpid()), "tpelastic-no-such-program"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    assert done.returncode == 127 and "tpelastic-no-such-program" in done.stderr


def test_environment_can_force_the_python_shim(monkeypatch):
    monkeypatch.setenv("TPELASTIC_SHIM", "python")
    assert deathsig.prefix(123) == [sys.executable, "-I", "-S", deathsig.SHIM, "123", "--"]


def test_an_early_probe_gives_the_same_answer_as_a_late_one():
    code = (
        "import sys\n"
        "from tpelastic.adapters.workers import deathsig\n"
        "if sys.argv[1] == 'early':\n"
        "    deathsig.start_probe()\n"
        "    deathsig.start_probe()  # idempotent\n"
        "print(deathsig.usable_setpriv())\n"
    )
    answers = {
        when: subprocess.run(
            [sys.executable, "-c", code, when], capture_output=True, text=True, timeout=30
        ).stdout.strip()
        for when in ("early", "late")
    }
    assert answers["early"] == answers["late"] == str(deathsig.usable_setpriv())
