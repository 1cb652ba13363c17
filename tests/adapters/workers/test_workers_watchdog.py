"""The watchdog on its own, in both forms (bash script and Python), with real processes.

Each test stands in for the agent with a helper process that starts the watchdog (the argv of
``watchdog.command``) and sleeping victims in sessions of their own, then checks what the
watchdog does when the helper dies, says ``done``, or drops a group.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import alive, wait_gone

from tpelastic.adapters.workers import watchdog

HELPER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    argv = __import__("json").loads(sys.argv[1])
    hold = os.environ.get("HOLD_PIPE") == "1"
    dog = subprocess.Popen(argv, stdin=subprocess.PIPE, start_new_session=True)
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    victims = [subprocess.Popen(sleep, start_new_session=True) for _ in range(2)]
    # A process outside the watchdog's groups that keeps the pipe's write end open: only the
    # parent-pid check can then tell that the helper died.
    holder = subprocess.Popen(sleep, pass_fds=(dog.stdin.fileno(),)) if hold else None
    dog.stdin.write(os.environ["LINES"].format(*[v.pid for v in victims]).encode())
    dog.stdin.flush()
    print(dog.pid, *[v.pid for v in victims], holder.pid if holder else 0, flush=True)
    if os.environ.get("THEN") == "exit":
        sys.exit(dog.wait(timeout=30))
    time.sleep(60)
    """
)

KINDS = ["bash", "python"]


def _argv(kind: str) -> list[str]:
    with pytest.MonkeyPatch.context() as patch:
        if kind == "python":
            patch.setenv("TPELASTIC_WATCHDOG", "python")
        else:
            patch.delenv("TPELASTIC_WATCHDOG", raising=False)
        return watchdog.command(0)[:-1]  # the helper appends its own pid: it is the agent


def _start(kind: str, lines: str, then: str = "sleep", hold: bool = False):
    code = (
        "import json, os, sys; a = json.loads(sys.argv[1]); a.append(str(os.getpid()));"
        " sys.argv[1] = json.dumps(a); exec(sys.argv[2])"
    )
    env = {**os.environ, "LINES": lines, "THEN": then, "HOLD_PIPE": "1" if hold else "0"}
    helper = subprocess.Popen(
        [sys.executable, "-c", code, json.dumps(_argv(kind)), HELPER],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    dog, *victims, holder = (int(p) for p in helper.stdout.readline().split())
    return helper, dog, victims, holder


def _end(helper: subprocess.Popen[str], *others: int) -> None:
    helper.kill()
    helper.wait(timeout=10)
    helper.stdout.close()
    _end_quietly(*others)


def test_the_agent_uses_bash_where_it_is_and_python_when_asked():
    assert _argv("bash")[0] == "/bin/bash" and "tpelastic-watchdog" in _argv("bash")
    assert _argv("python")[-1].endswith("watchdog.py")


@pytest.mark.parametrize("kind", KINDS)
def test_a_killed_agent_takes_its_groups_with_it(kind):
    helper, dog, victims, _ = _start(kind, "{0}\n{1}\n")
    try:
        assert alive([dog, *victims]) == [dog, *victims]
    finally:
        _end(helper)
    assert wait_gone([*victims, dog], timeout=5) == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_new_parent_is_noticed_even_with_the_pipe_held_open(kind):
    helper, dog, victims, holder = _start(kind, "{0}\n{1}\n", hold=True)
    try:
        _end(helper)
        assert wait_gone([*victims, dog], timeout=5) == []
    finally:
        _end_quietly(holder, *victims)


def _end_quietly(*pids: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("kind", KINDS)
def test_done_ends_it_cleanly_and_a_dropped_group_or_junk_is_spared(kind):
    # Victim 0 is dropped ("-pid"), junk lines are ignored, then "done": exit 0, nobody killed.
    helper, dog, victims, _ = _start(kind, "{0}\n{1}\nx1\n1-2\n\n-{0}\ndone\n", then="exit")
    try:
        assert helper.wait(timeout=10) == 0
        assert alive(victims) == victims
    finally:
        _end(helper, *victims)


@pytest.mark.parametrize("kind", KINDS)
def test_a_dropped_group_is_spared_when_the_agent_dies(kind):
    helper, dog, victims, _ = _start(kind, "{0}\n{1}\n-{0}\n")
    try:
        _end(helper)
        assert wait_gone([victims[1], dog], timeout=5) == []
        assert alive([victims[0]]) == [victims[0]]
    finally:
        _end_quietly(*victims)
