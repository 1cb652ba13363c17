"""``tpelastic run``'s flags as data, and a quick reading of a plain command line.

The flags are torchrun's, in dash and underscore spellings, each with a default from the
environment (``TPELASTIC_<FLAG>``, then torchrun's ``PET_<FLAG>``). argparse's parser is built
from this table (:mod:`tpelastic.cli.run_parser`) for help and for errors. :func:`quick_parse`
reads the usual well-formed command line without importing argparse at all: importing it and
building a parser of 35 flags cost every launch about 3 ms (issue 5). It gives up on anything
it does not read exactly as argparse does (help, a flag it does not know, a value that starts
with ``-``, ``--``, a missing script, ...) by returning None, and that command line then goes
to argparse, so help and errors stay argparse's own.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from types import SimpleNamespace

# name, short spellings, switch (store_true) or not, default (value flags), help.
FLAGS: tuple[tuple[str, tuple[str, ...], bool, str | None, str], ...] = (
    ("nnodes", (), False, "1", "N or MIN:MAX nodes"),
    ("nproc-per-node", (), False, "1", "workers per node: N, auto, cpu or gpu"),
    ("node-rank", (), False, "0", "this node's rank (static backend)"),
    ("rdzv-backend", (), False, "static", "static, tcp (c10d, p10d), file, ..."),
    ("rdzv-endpoint", (), False, "", "host[:port] of the rendezvous store"),
    ("rdzv-id", (), False, "none", "the job's run id (same on every node)"),
    ("rdzv-conf", (), False, "", "backend options k=v,k2=v2"),
    ("rdzv-timeout", (), False, None, "join timeout in seconds"),
    ("standalone", (), True, None, "one node, store hosted here"),
    ("max-restarts", (), False, "0", "job-wide restarts after worker failures"),
    ("monitor-interval", (), False, "0.1", "seconds between membership checks"),
    ("start-method", (), False, "spawn", "spawn, fork or forkserver"),
    ("role", (), False, "default", "the workers' role name"),
    ("log-dir", (), False, None, "folder for worker logs"),
    ("redirects", ("-r",), False, "0", "0-3 or rank:N,... to log files only"),
    ("tee", ("-t",), False, "0", "0-3 or rank:N,... to log files and console"),
    ("local-ranks-filter", (), False, "", "show only these local ranks' output"),
    ("local-addr", (), False, None, "this node's address for peers"),
    ("master-addr", (), False, None, "fixed bootstrap store address"),
    ("master-port", (), False, None, "fixed bootstrap store port"),
    ("exit-barrier-timeout", (), False, "300", "seconds to wait for peers at the end"),
    ("events", (), False, "null", "agent events: null, console, logging, jsonl:PATH"),
    ("events-file", (), False, None, "agent events as JSON lines to PATH"),
    ("metrics", (), False, None, "agent metrics: null, console or logging"),
    ("metrics-port", ("--metrics-addr",), False, None, "[HOST:]PORT: /metrics and /health"),
    ("timers", (), True, None, "let workers use tpelastic.timer.expires"),
    ("stall-timeout", (), False, None, "seconds without progress: worker stuck"),
    ("stall-first-step-timeout", (), False, None, "the same before the first step"),
    ("health-port", ("--health-addr",), False, None, "[HOST:]PORT: GET /health (JSON)"),
    ("module", ("-m",), True, None, "run the script as a module"),
    ("no-python", (), True, None, "run the script as a program"),
    ("run-path", (), True, None, "run the script with runpy.run_path"),
)


def spellings(name: str, shorts: tuple[str, ...]) -> list[str]:
    """Every spelling of flag ``name``: ``--a-b``, ``--a_b``, then its short ones."""
    names = [f"--{name}"]
    if "-" in name:
        names.append(f"--{name.replace('-', '_')}")
    return [*names, *shorts]


def dest(name: str) -> str:
    """The attribute a flag's value is stored under (``nproc-per-node`` -> ``nproc_per_node``)."""
    return name.replace("-", "_")


def default(name: str, switch: bool, given: str | None) -> str | bool | None:
    """A flag's default: ``TPELASTIC_<FLAG>``, else ``PET_<FLAG>``, else ``given``.

    A switch is on when its variable is ``1``, ``true`` or ``yes`` (any case).
    """
    key = name.upper().replace("-", "_")
    found: str | None = given
    for prefix in ("TPELASTIC_", "PET_"):
        if f"{prefix}{key}" in os.environ:
            found = os.environ[f"{prefix}{key}"]
            break
    if switch:
        return str(found if found is not None else "").lower() in ("1", "true", "yes")
    return found


# spelling -> (dest, switch)
_SPELLINGS = {
    spelling: (dest(name), switch)
    for name, shorts, switch, _default, _help in FLAGS
    for spelling in spellings(name, shorts)
}


def quick_parse(argv: Sequence[str]) -> SimpleNamespace | None:
    """The flags, script and script arguments of a plain ``tpelastic run`` command line.

    Reads: known flags in any of their spellings, each once or more (the last wins), as
    ``--flag value``, ``--flag=value`` (long spellings) or a bare switch; then the script, and
    everything after it untouched. The result has the attributes argparse's parser gives.

    Returns:
        The parsed command line, or None for anything else (help, an unknown or malformed
        flag, a value that starts with ``-`` or is empty, ``--`` anywhere, no
        script): argparse then reads it, with its own help and error messages.
    """
    if "--" in argv:
        return None  # argparse's handling of ``--`` (even after the script) is its own
    values: dict[str, object] = {
        dest(name): default(name, switch, given) for name, _s, switch, given, _h in FLAGS
    }
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("-"):
            values["training_script"] = token
            values["training_script_args"] = list(argv[i + 1 :])
            return SimpleNamespace(**values)
        spelling, equals, attached = token.partition("=")
        known = _SPELLINGS.get(spelling)
        if known is None:
            return None
        name, switch = known
        if switch:
            if equals:
                return None  # ``--switch=x``: argparse's error
            values[name] = True
            i += 1
            continue
        if equals:
            if not attached or attached.startswith("-") or not spelling.startswith("--"):
                return None  # ``--flag=``, ``--flag=-x``, ``-r=x``: argparse decides
            values[name] = attached
            i += 1
            continue
        if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
            return None  # no value, or one argparse may read as a flag or a negative number
        values[name] = argv[i + 1]
        i += 2
    return None  # no script: argparse says so


__all__ = ["FLAGS", "default", "dest", "quick_parse", "spellings"]
