"""``tpelastic run``'s quick reading of its command line against argparse's, the oracle.

``run_flags.quick_parse`` reads a plain command line without importing argparse (issue 5). It
must give exactly what argparse's parser gives, or None (then argparse reads it): a command line
never means something else on the quick path.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpelastic.cli import run, run_flags
from tpelastic.cli.errors import UsageError

SWITCHES = [s for name, shorts, switch, _d, _h in run_flags.FLAGS if switch for s in
            run_flags.spellings(name, shorts)]  # fmt: skip
VALUE_FLAGS = [s for name, shorts, switch, _d, _h in run_flags.FLAGS if not switch for s in
               run_flags.spellings(name, shorts)]  # fmt: skip
ENV_NAMES = [
    f"{prefix}{name.upper().replace('-', '_')}"
    for name, *_rest in run_flags.FLAGS
    for prefix in ("TPELASTIC_", "PET_")
]

# Values and script arguments: plain words, and the awkward ones (dashes, '=', spaces, empty,
# negative numbers, our own flags and argparse's help).
words = st.one_of(
    st.sampled_from(["2", "1:3", "tcp", "a=b,c=d", "", " ", "x y", "-1", "-", "--", "-h"]),
    st.sampled_from(["--help", "--nnodes", "-m", "--standalone", "=", "a=b", "train.py"]),
    st.text(alphabet="ab-=_:1 ", max_size=6),
)


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    argv: list[str] = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["switch", "value", "joined", "odd"]))
        if kind == "switch":
            argv.append(draw(st.sampled_from(SWITCHES)))
        elif kind == "value":
            argv += [draw(st.sampled_from(VALUE_FLAGS)), draw(words)]
        elif kind == "joined":
            argv.append(f"{draw(st.sampled_from(VALUE_FLAGS + SWITCHES))}={draw(words)}")
        else:
            argv.append(draw(st.sampled_from(["-h", "--help", "--", "--nnode", "-r3", "-mt", "-"])))
    if draw(st.booleans()):
        argv.append(draw(st.sampled_from(["train.py", "-x.py", "", "a b.py"])))
        argv += draw(st.lists(words, max_size=4))
    return argv


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in ENV_NAMES}
    try:
        for name in ENV_NAMES:
            os.environ.pop(name, None)
        os.environ.update(values)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def argparse_reads(argv: list[str]) -> dict[str, object] | str:
    """argparse's namespace as a dict, or its error / help exit as a string."""
    try:
        return vars(run.build_parser().parse_args(argv))
    except UsageError as error:
        return f"error: {error}"
    except SystemExit as stop:
        return f"exit {stop.code}"


@given(argv=command_lines(), env=st.dictionaries(st.sampled_from(ENV_NAMES), words, max_size=3))
def test_quick_reading_is_argparse_or_nothing(argv, env):
    with environment(env):
        quick = run_flags.quick_parse(argv)
        if quick is not None:
            assert vars(quick) == argparse_reads(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["--standalone", "--nproc-per-node", "2", "train.py"],
        ["--standalone", "--nproc_per_node=2", "train.py", "--lr", "0.1", "-h", "--nnodes", "3"],
        ["--nnodes", "1:2", "--rdzv-backend", "tcp", "--rdzv-endpoint", "h:29400", "t.py"],
        ["--rdzv_id=job", "--rdzv-conf", "join_timeout=5,x=y", "--max-restarts", "3", "t.py"],
        ["-m", "pkg.train", "--epochs", "1"],
        ["--no-python", "--tee", "3", "-r", "1", "/bin/echo", "hi"],
        ["--events-file=/tmp/e.jsonl", "--timers", "--run-path", "t.py", "-"],
        ["--role", "trainer", "--role", "second", "t.py"],  # the last one wins, as in argparse
        ["train.py"],
    ],
)
def test_plain_command_lines_take_the_quick_path(argv):
    quick = run_flags.quick_parse(argv)
    assert quick is not None
    assert vars(quick) == argparse_reads(argv)


def test_environment_defaults_are_argparse_s(monkeypatch):
    monkeypatch.setenv("PET_NNODES", "1:4")
    monkeypatch.setenv("TPELASTIC_NNODES", "2:3")  # ours first
    monkeypatch.setenv("PET_STANDALONE", "True")
    monkeypatch.setenv("TPELASTIC_TIMERS", "0")
    quick = run_flags.quick_parse(["t.py"])
    assert quick is not None
    assert (quick.nnodes, quick.standalone, quick.timers) == ("2:3", True, False)
    assert vars(quick) == argparse_reads(["t.py"])


@pytest.mark.parametrize(
    "argv",
    [
        [],  # no script
        ["--standalone"],
        ["-h"],
        ["--help", "t.py"],
        ["--nnode", "2", "t.py"],  # no abbreviations
        ["--nnodes", "t.py"],  # the value is taken: no script left
        ["--max-restarts", "-1", "t.py"],  # argparse reads negative numbers as values
        ["--nnodes=", "t.py"],
        ["--nnodes=--", "t.py"],  # argparse reads that as no value at all (3.11)
        ["--rdzv-conf=-x", "t.py"],
        ["--standalone=1", "t.py"],
        ["-r=3", "t.py"],
        ["-r3", "t.py"],
        ["--", "t.py"],
        ["t.py", "--"],  # argparse drops it (3.11): its business
        ["-", "t.py"],
    ],
)
def test_anything_unusual_goes_to_argparse(argv):
    assert run_flags.quick_parse(argv) is None


def test_a_launch_does_not_import_argparse(tmp_path):
    script = tmp_path / "noop.py"
    script.write_text("pass\n")
    code = (
        "import sys\n"
        "from tpelastic.cli.run import main\n"
        f"code = main(['--standalone', '--nproc-per-node', '1', {str(script)!r}])\n"
        "print(code, 'argparse' in sys.modules)\n"
    )
    env = {**os.environ, "TPELASTIC_LOG_LEVEL": "WARNING"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.stdout.split() == ["0", "False"], done.stderr[-2000:]
