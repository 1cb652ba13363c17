"""``tpelastic run`` reads a torchrun command line as torchrun 2.13 does: torch is the oracle.

Hypothesis writes torchrun command lines (torchrun's flags only, in either spelling, as
``--flag value`` or ``--flag=value``, unique abbreviations, ``PET_*`` variables). torch's
``torch.distributed.run`` parses each and builds its LaunchConfig through its own ``run`` (its
defaults for one node and for ``--standalone`` included; ``elastic_launch`` is replaced by a
catcher); ours builds ours. Field by field they must agree, or both must refuse the line. Every
place where we read a line otherwise is one entry of ``DIFFERENCES``, and each entry must be
written on docs/differences.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpelastic.cli import run
from tpelastic.cli.errors import UsageError

torchrun = pytest.importorskip(
    "torch.distributed.run", reason="torch 2.13 is the oracle: pip install torch==2.13.0"
)

REPO = Path(__file__).resolve().parents[2]
SCRIPT = str(REPO / "tests" / "e2e" / "scripts" / "worker.py")

# Where we deliberately read a torchrun line otherwise: key -> a phrase that
# docs/differences.md's CLI section must hold.
DIFFERENCES = {
    "standalone-id": "random run id of 12 hex digits",
    "shutdown-default": "--shutdown-timeout` default is 10 s",
    "stricter": "refused at parse time with one line",
    "both-spellings": "a prefix of both spellings of one flag",
}


def test_every_difference_is_on_the_differences_page() -> None:
    page = (REPO / "docs" / "differences.md").read_text()
    missing = [key for key, phrase in DIFFERENCES.items() if phrase not in page]
    assert missing == []


def _torch_flags() -> dict[str, argparse.Action]:
    parser = torchrun.get_args_parser()
    return {
        action.dest: action
        for action in parser._actions
        if action.option_strings and action.dest != "help"
    }


TORCH_FLAGS = _torch_flags()
ALL_SPELLINGS = sorted(s for a in TORCH_FLAGS.values() for s in a.option_strings)

VALUES: dict[str, Any] = {
    "nnodes": st.sampled_from(["1", "2", "1:2", "2:4", "3", "1:1"]),
    "nproc_per_node": st.sampled_from(["1", "2", "3", "cpu", "auto"]),
    "rdzv_backend": st.sampled_from(["static", "c10d", "etcd", "etcd-v2"]),
    "rdzv_endpoint": st.sampled_from(["", "127.0.0.1:29400", "localhost:1234", "[::1]:29400"]),
    "rdzv_id": st.sampled_from(["none", "job1", "abc-def"]),
    "rdzv_conf": st.sampled_from(
        ["", "join_timeout=30", "last_call_timeout=1,join_timeout=9", "timeout=60", "a=b"]
    ),
    "max_restarts": st.sampled_from(["0", "1", "3", "-1", "x"]),
    "monitor_interval": st.sampled_from(["0.1", "1", "5", "0.5", "abc"]),
    "start_method": st.sampled_from(["spawn", "fork", "forkserver", "thread"]),
    "event_log_handler": st.sampled_from(["null", "console"]),
    "role": st.sampled_from(["default", "trainer", "w"]),
    "log_dir": st.sampled_from(["", "LOGDIR"]),
    "redirects": st.sampled_from(["0", "1", "3", "0:1,1:2", "5:3", "x"]),
    "tee": st.sampled_from(["0", "2", "3", "1:3", "9"]),
    "local_ranks_filter": st.sampled_from(["", "0", "0,1", "1,5", "a"]),
    "duplicate_stdout_filters": st.sampled_from(["", "apple", "a,b", "x,,y"]),
    "duplicate_stderr_filters": st.sampled_from(["", "err", "a,b,c"]),
    "node_rank": st.sampled_from(["0", "1", "x"]),
    "master_addr": st.sampled_from(["127.0.0.1", "localhost", "10.1.2.3"]),
    "master_port": st.sampled_from(["29500", "1234", "40000", "x"]),
    "local_addr": st.sampled_from(["127.0.0.1", "node0"]),
    "logs_specs": st.just(None),  # only the default: a name needs an installed entry point
    "numa_binding": st.sampled_from(["node", "socket", "exclusive", "core-complex", "bad"]),
    "signals_to_handle": st.sampled_from(
        ["SIGTERM,SIGINT,SIGHUP,SIGQUIT", "SIGTERM", "SIGTERM,SIGUSR1", "SIGINT,SIGUSR2"]
    ),
    "shutdown_timeout": st.sampled_from(["0", "5", "30", "-1", "x"]),
}
SWITCHES = [dest for dest, action in TORCH_FLAGS.items() if action.nargs == 0]
ENV_VALUE_FLAGS = ["nnodes", "nproc_per_node", "max_restarts", "rdzv_backend", "role", "tee"]


def _abbreviations(spelling: str) -> list[str]:
    """``spelling`` and each prefix of it that names it alone among torchrun's flags."""
    if not spelling.startswith("--"):
        return [spelling]
    out = []
    for end in range(3, len(spelling) + 1):
        prefix = spelling[:end]
        owners = {
            id(a)
            for a in TORCH_FLAGS.values()
            if any(s.startswith(prefix) for s in a.option_strings if s.startswith("--"))
        }
        if len(owners) == 1:
            out.append(prefix)
    return out or [spelling]


def _one_flag_prefix(argv: list[str]) -> bool:
    for arg in argv:
        if arg == SCRIPT:
            return False
        word = arg.partition("=")[0]
        owners = [
            a for a in TORCH_FLAGS.values() if any(s.startswith(word) for s in a.option_strings)
        ]
        spellings = [s for a in owners for s in a.option_strings if s.startswith(word)]
        if word.startswith("--") and len(owners) == 1 and len(spellings) > 1:
            return True
    return False


@st.composite
def command_lines(draw: st.DrawFn) -> tuple[list[str], dict[str, str]]:
    argv: list[str] = []
    chosen = draw(st.lists(st.sampled_from(sorted(TORCH_FLAGS)), max_size=8, unique=True))
    for dest in chosen:
        action = TORCH_FLAGS[dest]
        spelling = draw(st.sampled_from(list(action.option_strings)))
        spelling = draw(st.sampled_from(_abbreviations(spelling)))
        if dest in SWITCHES:
            if dest in ("no_python", "run_path"):
                continue  # the script below is a Python file: these are drawn separately
            argv.append(spelling)
            continue
        value = draw(VALUES[dest])
        if value is None:
            continue
        if spelling.startswith("--") and draw(st.booleans()):
            argv.append(f"{spelling}={value}")
        else:
            argv += [spelling, value]
    env: dict[str, str] = {}
    for dest in draw(st.lists(st.sampled_from(ENV_VALUE_FLAGS), max_size=2, unique=True)):
        env[f"PET_{dest.upper()}"] = draw(VALUES[dest])
    if draw(st.integers(0, 9)) == 0:
        env["PET_STANDALONE"] = draw(st.sampled_from(["0", "1", "2"]))
    argv.append(SCRIPT)
    argv += draw(st.lists(st.sampled_from(["--lr", "0.1", "-x", "--nnodes", "3"]), max_size=3))
    return argv, env


@contextlib.contextmanager
def environment(extra: dict[str, str], tmp: str) -> Iterator[None]:
    saved = dict(os.environ)
    for key in list(os.environ):
        if key.startswith(("PET_", "TPELASTIC_", "TORCH_ELASTIC_")) or key == "OMP_NUM_THREADS":
            del os.environ[key]
    os.environ.update(extra)
    os.environ["TMPDIR"] = tmp  # torch makes its temporary log folder at once
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def torch_reads(argv: list[str]) -> Any:
    """torch's (config, cmd, cmd_args) for ``argv``, or the exception it raises."""
    caught: dict[str, Any] = {}

    class Catch:
        def __init__(self, config: Any, entrypoint: Any) -> None:
            caught["config"], caught["cmd"] = config, entrypoint

        def __call__(self, *args: Any) -> None:
            caught["args"] = list(args)

    real = torchrun.elastic_launch
    torchrun.elastic_launch = Catch
    try:
        with contextlib.redirect_stderr(open(os.devnull, "w")):
            torchrun.run(torchrun.parse_args(argv))
    except (SystemExit, Exception) as error:  # torch's refusals are of every kind
        return error
    finally:
        torchrun.elastic_launch = real
    return caught


def ours_reads(argv: list[str]) -> Any:
    try:
        ns = run.parse_args(argv)
        return run.config_from_args(ns), run.entrypoint_from_args(ns)
    except UsageError as error:
        return error


def _std(value: Any, nproc: int) -> dict[int, int]:
    if isinstance(value, dict):
        return {rank: int(value.get(rank, 0)) for rank in range(nproc)}
    return dict.fromkeys(range(nproc), int(value))


def compare(argv: list[str], env: dict[str, str], theirs: Any, ours: Any, log_dir: str) -> None:
    if isinstance(theirs, BaseException):
        if not isinstance(ours, UsageError):
            # "both-spellings": a prefix of both spellings of one flag names it (Python 3.11's
            # argparse calls that ambiguous; 3.12's does not).
            assert _one_flag_prefix(argv), f"torch refused ({theirs!r}), we accepted: {argv}"
        return
    if isinstance(ours, UsageError):
        # "stricter": a value torch takes and fails on later (or never checks) is a usage line.
        reason = str(ours)
        stricter = (
            "--node-rank" in reason  # a static node rank outside 0..MAX-1 waits forever there
            or "--rdzv-conf" in reason
        )
        assert stricter, f"we refused ({reason}), torch accepted: {argv} {env}"
        return
    t, (config, (cmd, cmd_args)) = theirs["config"], ours
    standalone = t.rdzv_endpoint == "localhost:0"
    assert config.standalone == standalone
    for name in ("min_nodes", "max_nodes", "nproc_per_node", "role", "rdzv_backend"):
        assert getattr(config, name) == getattr(t, name), name
    assert config.rdzv_endpoint == t.rdzv_endpoint
    if standalone:  # "standalone-id": both random, in their own formats
        assert len(config.run_id) == 12 and config.run_id != "none"
    else:
        assert config.run_id == t.run_id
    conf = dict(t.rdzv_configs)
    given = [item.partition("=")[0].strip() for item in run.parse_args(argv).rdzv_conf.split(",")]
    if "timeout" not in given:
        conf.pop("timeout")  # torch's LaunchConfig adds its 900 s default
    assert config.rdzv_configs == conf
    for name in ("max_restarts", "monitor_interval", "start_method", "local_addr"):
        assert getattr(config, name) == getattr(t, name), name
    assert config.events == t.event_log_handler
    assert config.signals_to_handle == t.signals_to_handle
    assert config.duplicate_stdout_filters == t.duplicate_stdout_filters
    assert config.duplicate_stderr_filters == t.duplicate_stderr_filters
    assert config.virtual_local_rank == t.virtual_local_rank
    assert config.log_line_prefix_template == t.log_line_prefix_template
    if config.shutdown_timeout is None:  # "shutdown-default": ours is 10 s, torch's 30 s
        assert t.shutdown_timeout == 30
    else:
        assert config.shutdown_timeout == t.shutdown_timeout
    numa = t.numa_options.affinity_mode.value if t.numa_options is not None else None
    assert config.numa_options == numa
    specs = t.logs_specs
    if config.log_dir is None:
        assert os.path.basename(specs.root_log_dir).startswith("torchelastic_")
    else:
        assert config.log_dir == specs.root_log_dir == log_dir
    nproc = config.nproc_per_node
    assert _std(config.redirects, nproc) == _std(specs._redirects, nproc)
    assert _std(config.tee, nproc) == _std(specs._tee, nproc)
    assert config.local_ranks_filter == specs._local_ranks_filter
    assert cmd == theirs["cmd"] == sys.executable
    assert cmd_args == theirs["args"]


@settings(
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(line=command_lines())
def test_torchrun_command_lines_mean_what_they_mean_to_torchrun(line, tmp_path) -> None:
    argv, env = line
    log_dir = str(tmp_path / "logs")
    argv = [log_dir if a == "LOGDIR" else a.replace("=LOGDIR", f"={log_dir}") for a in argv]
    with environment(env, str(tmp_path)):
        theirs = torch_reads(argv)
        ours = ours_reads(argv)
    compare(argv, env, theirs, ours, log_dir)


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["--nproc-per", "2", SCRIPT], {}),
        (["--max-restart", "3", SCRIPT], {}),
        (["--event-log", "console", SCRIPT], {}),
        (["--shutdown-timeout", "5", "--signals-to-handle", "SIGTERM,SIGUSR1", SCRIPT], {}),
        (
            [
                "--nnodes",
                "2",
                "--node-rank",
                "0",
                "--master-addr",
                "h",
                "--master-port",
                "1",
                SCRIPT,
            ],
            {},
        ),  # fmt: skip
        ([SCRIPT], {"PET_NNODES": "2"}),
        ([SCRIPT], {"PET_STANDALONE": "2"}),
        (["--rdzv-backend", "c10d", SCRIPT], {}),
        (["--log-dir", "", SCRIPT], {}),
        (
            [
                "--virtual-local-rank",
                "--numa-binding",
                "node",
                "--duplicate-stdout-filters",
                "a,,b",
                "--duplicate-stderr-filters",
                "e",
                "--event-log-handler",
                "console",
                SCRIPT,
            ],
            {},
        ),  # fmt: skip
        (["--redirects", "0:3,7:1", "--local-ranks-filter", "0,9", SCRIPT], {}),
    ],
)
def test_the_issue_s_torchrun_lines(argv, env, tmp_path) -> None:
    with environment(env, str(tmp_path)):
        theirs = torch_reads(argv)
        ours = ours_reads(argv)
    assert not isinstance(theirs, BaseException), theirs
    compare(argv, env, theirs, ours, str(tmp_path / "logs"))


def test_pet_standalone_is_read_as_torchrun(tmp_path) -> None:
    with environment({"PET_STANDALONE": "2"}, str(tmp_path)):
        assert run.parse_args([SCRIPT]).standalone is True
    with environment({"PET_STANDALONE": "0"}, str(tmp_path)):
        assert run.parse_args([SCRIPT]).standalone is False
    with environment({"PET_STANDALONE": "yes"}, str(tmp_path)):
        with pytest.raises(UsageError, match="PET_STANDALONE must be an integer"):
            run.parse_args([SCRIPT])


def test_python_exec_is_the_workers_interpreter(tmp_path) -> None:
    with environment({"PYTHON_EXEC": "/usr/bin/python3"}, str(tmp_path)):
        cmd, args = run.entrypoint_from_args(run.parse_args([SCRIPT, "--a"]))
        theirs = torch_reads([SCRIPT, "--a"])
    assert (
        (cmd, args)
        == (theirs["cmd"], theirs["args"])
        == ("/usr/bin/python3", ["-u", SCRIPT, "--a"])
    )
