"""Warm interpreters: when a worker may start from one, and that it is then a plain start's twin.

The decisions (``plan_for``, ``refusal``, ``script_refusal``) are checked alone; the rest with
real processes: the same script is started plainly and from a warm interpreter, and what it
sees (argv, ``__main__``, ``sys.path[0]``, env, cwd, session) and how it fails (exit code,
signal, traceback, error file) must be equal. The spares import a module of the test's own
that sleeps at import, standing in for tensorplay: fast to set up, and its import time is
known, which the latency test uses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tpelastic.adapters.workers import warm
from tpelastic.adapters.workers.context import on_launcher_thread
from tpelastic.adapters.workers.start import start_processes
from tpelastic.adapters.workers.warm import WarmPlan, WarmPool, plan_for, refusal

PY = sys.executable
IMPORT_SLEEP = 2.0

PROBE = """
import json, os, re, sys, __main__
print("RUNNING", flush=True)
view = {
    "argv": sys.argv, "path0": sys.path[0], "name": __name__, "cwd": os.getcwd(),
    "main": {k: re.sub(" at 0x[0-9a-f]+", "", repr(v))
             if k not in ("__loader__", "__builtins__") else type(v).__name__
             for k, v in vars(__main__).items()},
    "main_is_globals": vars(__main__) is globals(),
    "env": dict(os.environ), "leader": os.getpgid(0) == os.getpid() == os.getsid(0),
    "stdin": os.read(0, 10).decode(), "slowmod": "slowmod" in sys.modules,
    "boot_left": [m for m in sys.modules if "warm_boot" in m],
    "cmdline": open("/proc/self/cmdline").read().split(chr(0))[:-1],
    "comm": open("/proc/self/comm").read(),
}
print(json.dumps(view))
code = os.environ.get("MODE", "0")
if code == "raise":
    def deep():
        raise ValueError("boom")
    deep()
elif code == "kbi":
    raise KeyboardInterrupt
elif code == "exit-text":
    sys.exit("bye")
elif code == "sigterm":
    os.kill(os.getpid(), 15)
elif code == "record":
    from tpelastic.errors import record

    @record
    def main():
        raise RuntimeError("recorded")
    main()
sys.exit(int(code) if code.isdigit() else 0)
"""


@pytest.fixture
def job(tmp_path: Path) -> dict[str, str]:
    """A folder with the probe script, a package for ``-m``, and ``slowmod`` (sleeps at import,
    prints a line at import) on PYTHONPATH."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "slowmod.py").write_text(
        "import sys, time\nprint('slowmod imported', file=sys.stderr)\n"
        f"time.sleep({IMPORT_SLEEP})\n"
    )
    (lib / "badmod.py").write_text("raise ImportError('badmod cannot be imported')\n")
    app = tmp_path / "app"
    (app / "pkg").mkdir(parents=True)
    (app / "probe.py").write_text(PROBE)
    (app / "pkg" / "__init__.py").write_text("")
    (app / "pkg" / "probe.py").write_text(PROBE)
    return {"lib": str(lib), "app": str(app), "logs": str(tmp_path / "logs")}


@pytest.fixture
def pool(job: dict[str, str], monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PYTHONPATH", job["lib"])
    monkeypatch.chdir(job["app"])
    made = WarmPool(on_launcher_thread, ("slowmod",))
    yield made
    made.close()


_SERIAL = iter(range(10**6))


def run_once(
    pool: WarmPool | None,
    job: dict[str, str],
    args: tuple[str, ...],
    env: dict[str, str],
    **kw: object,
) -> tuple[bool, int | None, str, str, object]:
    """Start one worker, wait for it; (warm?, failure exit code, stdout, stderr, failure)."""
    ctx = start_processes(
        "probe",
        PY,
        args,
        {0: env},
        log_dir=job["logs"],
        redirects=kw.pop("redirects", "3"),  # type: ignore[arg-type]
        attempt=next(_SERIAL),
        warm=pool,
        **kw,  # type: ignore[arg-type]
    )
    try:
        result = ctx.wait(timeout=60)
        assert result is not None, "the worker did not end within 60 s"
    finally:
        ctx.close()
    failure = result.failures.get(0)
    out = Path(result.stdouts[0]).read_text() if result.stdouts[0] else ""
    err = Path(result.stderrs[0]).read_text() if result.stderrs[0] else ""
    return bool(ctx.warm_ranks), failure.exitcode if failure else None, out, err, failure


def ready(pool: WarmPool, timeout: float = 60.0, count: int = 1) -> None:
    """Wait until the pool holds ``count`` spares for rank 0 (made in the background)."""
    deadline = time.monotonic() + timeout
    while len(pool.spares(0)) < count:
        assert time.monotonic() < deadline, "no warm interpreter was made"
        time.sleep(0.02)


def view_of(out: str) -> dict[str, object]:
    return json.loads(next(line for line in out.splitlines() if line.startswith("{")))


# -- decisions ------------------------------------------------------------------------------


def test_plan_for_scripts_and_modules() -> None:
    assert plan_for(PY, ("-u", "train.py", "--lr", "1")) == WarmPlan(
        PY, ("-u",), "script", "train.py", ("--lr", "1")
    )
    assert plan_for("python3", ("-u", "-W", "ignore", "-m", "pkg.main", "x")) == WarmPlan(
        "python3", ("-u", "-W", "ignore"), "module", "pkg.main", ("x",)
    )
    assert plan_for(PY, ("-Xdev", "-mpkg")) == WarmPlan(PY, ("-Xdev",), "module", "pkg", ())


@pytest.mark.parametrize(
    ("entrypoint", "args", "numa"),
    [
        ("/usr/bin/env", ("python", "train.py"), False),  # --no-python: any program
        ("./train.sh", (), False),
        (PY, ("-u", "-c", "import runpy; ...", "train.py"), False),  # --run-path
        (PY, ("-i", "train.py"), False),
        (PY, ("-",), False),
        (PY, ("-u",), False),
        (PY, ("-u", "train.py"), True),
    ],
)
def test_plan_for_falls_back(entrypoint: str, args: tuple[str, ...], numa: bool) -> None:
    assert isinstance(plan_for(entrypoint, args, numa=numa), str)


def test_refusal_allows_only_the_per_attempt_variables_to_differ() -> None:
    plan = WarmPlan(PY, ("-u",), "script", "t.py", ())
    base = {"PATH": "/bin", "LOCAL_RANK": "0", "OMP_NUM_THREADS": "1"}
    spare_env = warm.base_env({**base, "RANK": "3", "MASTER_PORT": "1"})
    assert spare_env == base
    new = {
        **base,
        "RANK": "5",
        "WORLD_SIZE": "6",
        "MASTER_PORT": "2",
        "TORCHELASTIC_ERROR_FILE": "e",
    }
    assert refusal(plan, spare_env, plan, new) is None
    assert "PYTHONPATH" in str(refusal(plan, spare_env, plan, {**new, "PYTHONPATH": "/x"}))
    assert "LOCAL_RANK" in str(refusal(plan, spare_env, plan, {**new, "LOCAL_RANK": "1"}))
    other = WarmPlan(PY, ("-u",), "script", "other.py", ())
    assert refusal(plan, spare_env, other, new) == "the command changed"


def test_script_refusal_folders_and_zips(tmp_path: Path) -> None:
    import zipfile

    (tmp_path / "t.py").write_text("pass\n")
    with zipfile.ZipFile(tmp_path / "app.pyz", "w") as out:
        out.writestr("__main__.py", "pass\n")

    def plan(target: str) -> WarmPlan:
        return WarmPlan(PY, (), "script", target, ())

    assert warm.script_refusal(plan("t.py"), str(tmp_path)) is None
    assert "zip" in str(warm.script_refusal(plan("app.pyz"), str(tmp_path)))
    assert "not a file" in str(warm.script_refusal(plan("."), str(tmp_path)))
    assert warm.script_refusal(WarmPlan(PY, (), "module", "pkg", ()), str(tmp_path)) is None


def test_switches() -> None:
    assert warm.enabled({}) and warm.enabled({warm.ENABLE_ENV: "1"})
    assert not warm.enabled({warm.ENABLE_ENV: "0"}) and not warm.enabled({warm.ENABLE_ENV: "off"})
    assert warm.imports_from_env({}) == ("tensorplay",)
    assert warm.imports_from_env({warm.IMPORTS_ENV: "numpy, tensorplay"}) == ("numpy", "tensorplay")
    assert warm.depth_from_env({}) == 2 and warm.depth_from_env({warm.DEPTH_ENV: "1"}) == 1
    assert warm.depth_from_env({warm.DEPTH_ENV: "0"}) == 2  # at least one: else it is off
    assert warm.delay_from_env({}) == 5.0 and warm.delay_from_env({warm.DELAY_ENV: "0"}) == 0.0
    assert warm.delay_from_env({warm.DELAY_ENV: "-1"}) == 5.0
    assert warm.delay_from_env({warm.DELAY_ENV: "soon"}) == 5.0


# -- real processes -------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["script", "module"])
def test_the_worker_sees_what_a_plain_start_shows(
    pool: WarmPool, job: dict[str, str], how: str
) -> None:
    args = ("-u", "probe.py", "a", "--b") if how == "script" else ("-u", "-m", "pkg.probe", "a")
    plain = run_once(None, job, args, {"RANK": "0", "X": "1"})
    first = run_once(pool, job, args, {"RANK": "0", "X": "1"})  # no spare yet: plain, refills
    ready(pool)
    hot = run_once(pool, job, args, {"RANK": "1", "X": "1"})
    assert (plain[0], first[0], hot[0]) == (False, False, True)
    want, got = view_of(plain[2]), view_of(hot[2])
    assert got.pop("slowmod") is True and want.pop("slowmod") is False
    want_env, got_env = want.pop("env"), got.pop("env")
    want_cmd, got_cmd = want.pop("cmdline"), got.pop("cmdline")
    assert isinstance(want_cmd, list) and isinstance(got_cmd, list)
    assert want["main"] == got["main"], sorted(
        set(want["main"].items()) ^ set(got["main"].items())  # type: ignore[union-attr]
    )
    assert want == got
    assert isinstance(want_env, dict) and isinstance(got_env, dict)
    differ = {k for k in {*want_env, *got_env} if want_env.get(k) != got_env.get(k)}
    assert differ <= warm.PER_ATTEMPT, differ
    assert got_env["RANK"] == "1"
    assert got["boot_left"] == [] and got["main_is_globals"] is True
    # Its command line names the script (or module) and its arguments, as a plain start's.
    assert got_cmd[-len(args) + 1 :] == want_cmd[-len(args) + 1 :]
    # What the spare's import printed is in the worker's own stderr, as a plain start's would be.
    assert "slowmod imported" in hot[3]


@pytest.mark.parametrize("mode", ["raise", "kbi", "exit-text", "sigterm", "3", "record"])
def test_a_failing_script_fails_the_same_way(
    pool: WarmPool, job: dict[str, str], mode: str
) -> None:
    args = ("-u", "probe.py")
    env = {"MODE": mode, "PYTHONPATH": job["lib"]}
    plain = run_once(pool, job, args, env)
    ready(pool)
    hot = run_once(pool, job, args, env)
    assert (plain[0], hot[0]) == (False, True)
    assert plain[1] == hot[1] and plain[1] is not None
    assert plain[3].replace("slowmod imported\n", "") == hot[3].replace("slowmod imported\n", "")
    plain_data = getattr(plain[4], "error_file_data", None)
    hot_data = getattr(hot[4], "error_file_data", None)
    if mode == "record":
        assert plain_data and hot_data
        for key in ("message", "exception_type", "traceback", "schema_version"):
            assert plain_data[key] == hot_data[key], key
        assert "recorded" in plain_data["message"]
    else:
        assert plain_data == hot_data


def test_tee_prefixes_and_redirects_as_a_plain_start(
    pool: WarmPool, job: dict[str, str], capfd: pytest.CaptureFixture[str]
) -> None:
    args = ("-u", "probe.py")
    capfd.readouterr()
    plain = run_once(pool, job, args, {"RANK": "4"}, redirects="0", tee="3")
    plain_console = capfd.readouterr()
    ready(pool)
    hot = run_once(pool, job, args, {"RANK": "4"}, redirects="0", tee="3")
    console = capfd.readouterr()
    assert (plain[0], hot[0]) == (False, True)
    assert (
        plain_console.out.splitlines()[0]
        == console.out.splitlines()[0]
        == ("[probe0|rank4]:RUNNING")
    )
    assert console.err == "[probe0|rank4]:slowmod imported\n"  # held until the hand-over
    assert hot[2].splitlines()[0] == "RUNNING"  # and the teed file


def test_a_spare_whose_import_fails_gives_a_plain_start(
    job: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", job["lib"])
    monkeypatch.chdir(job["app"])
    bad = WarmPool(on_launcher_thread, ("badmod",))
    try:
        run_once(bad, job, ("-u", "probe.py"), {})
        ready(bad, count=2)
        assert [spare.report(60) for spare in bad.spares(0)] == [False, False]
        again = run_once(bad, job, ("-u", "probe.py"), {"MODE": "7"})
        assert again[0] is False and again[1] == 7
    finally:
        bad.close()


def test_a_changed_environment_gives_a_plain_start(pool: WarmPool, job: dict[str, str]) -> None:
    run_once(pool, job, ("-u", "probe.py"), {"X": "1"})
    ready(pool)
    spare_pid = pool.spares(0)[0].pid
    again = run_once(pool, job, ("-u", "probe.py"), {"X": "2"})
    assert again[0] is False and view_of(again[2])["env"]["X"] == "2"  # type: ignore[index]
    assert not os.path.exists(f"/proc/{spare_pid}") or _is_zombie(spare_pid) is False


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as src:
            return src.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def test_a_warm_start_skips_the_import(pool: WarmPool, job: dict[str, str]) -> None:
    """The restart latency: from the start call to the script running, a warm start does not
    pay the spares' import (here a 2 s sleep, as tensorplay's import is seconds under load)."""
    args = ("-u", "probe.py")

    def time_to_running(use: WarmPool | None) -> tuple[bool, float]:
        began = time.monotonic()
        ctx = start_processes(
            "probe", PY, args, {0: {"MODE": "0"}}, log_dir=job["logs"], redirects="3",
            attempt=next(_SERIAL), warm=use,
        )  # fmt: skip
        try:
            path = Path(ctx.files[0].stdout)
            while "RUNNING" not in (path.read_text() if path.exists() else ""):
                assert time.monotonic() - began < 60
                time.sleep(0.005)
            return bool(ctx.warm_ranks), time.monotonic() - began
        finally:
            ctx.wait(timeout=60)
            ctx.close()

    env_with_slowmod = {"PYTHONPATH": job["lib"]}
    assert os.environ["PYTHONPATH"] == env_with_slowmod["PYTHONPATH"]
    # A plain start of a script that imports slowmod itself pays IMPORT_SLEEP.
    (Path(job["app"]) / "probe.py").write_text("import slowmod\n" + PROBE)
    plain = time_to_running(None)
    time_to_running(pool)
    ready(pool)
    assert pool.spares(0)[0].report(60)  # imported: as for a restart some seconds later
    hot = time_to_running(pool)
    assert plain[0] is False and hot[0] is True
    assert plain[1] >= IMPORT_SLEEP
    assert hot[1] < IMPORT_SLEEP / 2, (plain, hot)


def test_spares_die_with_their_agent(job: dict[str, str], tmp_path: Path) -> None:
    """No orphan: an agent killed with SIGKILL takes its waiting spares with it."""
    agent = textwrap.dedent(
        f"""
        import os, sys, time
        from tpelastic.adapters.workers.context import on_launcher_thread
        from tpelastic.adapters.workers.start import start_processes
        from tpelastic.adapters.workers.warm import WarmPool
        os.chdir({job["app"]!r})
        pool = WarmPool(on_launcher_thread, ("slowmod",))
        ctx = start_processes("p", sys.executable, ("-u", "probe.py"), {{0: {{}}}},
                              log_dir={str(tmp_path / "logs")!r}, redirects="3", warm=pool)
        ctx.wait(timeout=60)
        ctx.close()
        while not pool.spares(0):
            time.sleep(0.02)
        print(pool.spares(0)[0].pid, flush=True)
        time.sleep(600)
        """
    )
    env = {**os.environ, "PYTHONPATH": job["lib"]}
    proc = subprocess.Popen([PY, "-c", agent], stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert proc.stdout is not None
        spare = int(proc.stdout.readline())
        assert os.path.exists(f"/proc/{spare}")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{spare}") and not _is_zombie(spare):
        assert time.monotonic() < deadline, f"spare {spare} outlived its agent"
        time.sleep(0.02)


def test_close_stops_every_spare(pool: WarmPool, job: dict[str, str]) -> None:
    run_once(pool, job, ("-u", "probe.py"), {})
    ready(pool, count=2)
    spares = pool.spares(0)
    assert [spare.report(60) for spare in spares] == [True, True]
    # Waiting spares go by a name of their own in ps; a worker keeps the interpreter's.
    assert [Path(f"/proc/{s.pid}/comm").read_text().strip() for s in spares] == [
        "tp-warm-spare"
    ] * 2
    pool.close()
    assert [spare.popen.poll() is not None for spare in spares] == [True, True]
    run_once(pool, job, ("-u", "probe.py"), {})
    time.sleep(0.3)
    assert pool.spares(0) == []  # a closed pool makes no more


def test_starts_closer_than_an_import_are_all_warm_and_never_wait(
    pool: WarmPool, job: dict[str, str]
) -> None:
    """Two spares per rank serve two quick starts; a spare still importing is handed over at
    once (the start does not wait for its import: the spare runs the script after it)."""
    run_once(pool, job, ("-u", "probe.py"), {})
    ready(pool, count=2)
    kinds = []
    for _ in range(3):
        began = time.monotonic()
        ctx = start_processes(
            "probe", PY, ("-u", "probe.py"), {0: {}}, log_dir=job["logs"], redirects="3",
            attempt=next(_SERIAL), warm=pool,
        )  # fmt: skip
        started_in = time.monotonic() - began
        result = ctx.wait(timeout=60)
        ctx.close()
        assert result is not None and not result.failures
        kinds.append((bool(ctx.warm_ranks), started_in < IMPORT_SLEEP / 2))
    # The third start's spare was made by the first start: still importing when taken.
    assert kinds == [(True, True)] * 3, kinds


AGENT_JOB = """
import os, sys
kind = "WARM" if "slowmod" in sys.modules else "PLAIN"
os.write(1, f"{kind} {os.environ['TORCHELASTIC_RESTART_COUNT']} {os.environ['RANK']}\\n".encode())
sys.exit(5 if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" else 0)
"""


@pytest.mark.slow
@pytest.mark.parametrize("switch", [None, "--warm-workers=off", "delay"])
def test_the_agent_starts_warm_first_and_after_a_restart(
    job: dict[str, str], tmp_path: Path, switch: str | None
) -> None:
    """``tpelastic run``: the restart takes a spare made after the first start; off by the
    flag, none is; within the delay after the first start (5 s by default), none is made."""
    script = tmp_path / "job.py"
    script.write_text(AGENT_JOB)
    delay = "60" if switch == "delay" else "0"
    env = {**os.environ, "PYTHONPATH": job["lib"], warm.IMPORTS_ENV: "slowmod"}
    env[warm.DELAY_ENV] = delay
    flags = [switch] if switch and switch.startswith("--") else []
    done = subprocess.run(
        [PY, "-m", "tpelastic", "run", "--standalone", "--nproc-per-node=2", "--max-restarts=1",
         "--monitor-interval=0.1", *flags, str(script)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = sorted(line for line in done.stdout.splitlines() if line.startswith(("WARM", "PLAIN")))
    kind = "PLAIN" if switch else "WARM"  # 60 s of delay: the restart comes before any spare
    # The first start is always plain: the first spares are made after it.
    assert [line.split()[1:] for line in lines] == [["0", "0"], ["0", "1"], ["1", "0"], ["1", "1"]]
    assert lines[:2] == ["PLAIN 0 0", "PLAIN 0 1"], done.stdout
    assert lines[2:] == [f"{kind} 1 0", f"{kind} 1 1"], done.stdout


def test_a_ranks_spares_are_made_one_after_the_other(pool: WarmPool, job: dict[str, str]) -> None:
    """The second spare starts once the first has imported: they never share the CPU."""
    import psutil

    run_once(pool, job, ("-u", "probe.py"), {})
    ready(pool, count=2)
    first, second = (psutil.Process(s.pid).create_time() for s in pool.spares(0))
    assert second - first >= IMPORT_SLEEP * 0.9


def test_a_ranks_first_start_takes_only_a_ready_spare(pool: WarmPool, job: dict[str, str]) -> None:
    """A first start never waits for an import (the job may not need it): a spare still
    importing is kept for the next start, which takes it."""
    plan = plan_for(PY, ("-u", "probe.py"))
    assert isinstance(plan, WarmPlan)
    env = {**os.environ, "RANK": "0"}
    pool.refill(0, plan, env, job["app"], count=1)
    ready(pool)
    assert pool.spares(0)[0].report() is None  # importing: slowmod sleeps 2 s
    first = run_once(pool, job, ("-u", "probe.py"), {})
    assert first[0] is False and len(pool.spares(0)) >= 1
    again = run_once(pool, job, ("-u", "probe.py"), {})
    assert again[0] is True
