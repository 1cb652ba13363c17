"""Flags, settings and the cost of the default path: observability is off unless asked for, and
then nothing of it is imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from obs_helpers import REPO, WORKER

from tpelastic.adapters.launcher.config import ConfigError, LaunchConfig
from tpelastic.cli.errors import UsageError
from tpelastic.cli.run import build_parser, config_from_args

LAZY = (
    "tpelastic.adapters.sinks.agent_trace",
    "tpelastic.adapters.sinks.prometheus",
    "tpelastic.adapters.timer.file_based",
    "tpelastic.adapters.timer.api",
    "tpelastic.adapters.progress",
    "tpelastic.adapters.health",
    "prometheus_client",
    "http.server",
)
_PROBE = """
import json, sys
from tpelastic.cli.run import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "loaded": sorted(m for m in %r if m in sys.modules)}))
"""


def _probe(*args: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TPELASTIC_", "PET_"))}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE % (LAZY,), *args],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_default_run_imports_no_observability_module() -> None:
    assert _probe("--standalone", WORKER) == {"code": 0, "loaded": []}


def test_enabled_features_load_their_modules(tmp_path: Path) -> None:
    found = _probe(
        "--standalone", "--timers", "--stall-timeout", "30",
        "--events-file", str(tmp_path / "ev.jsonl"), WORKER,
    )  # fmt: skip
    assert found["code"] == 0
    assert set(found["loaded"]) >= {
        "tpelastic.adapters.sinks.agent_trace",
        "tpelastic.adapters.timer.file_based",
        "tpelastic.adapters.progress",
    }


def _config(*argv: str) -> LaunchConfig:
    config = config_from_args(build_parser().parse_args([*argv, WORKER]))
    assert isinstance(config, LaunchConfig)
    return config


def test_flags_fill_the_launch_config(tmp_path: Path) -> None:
    config = _config(
        "--standalone", "--events-file", str(tmp_path / "e.jsonl"), "--metrics", "console",
        "--metrics-port", "9100", "--timers", "--stall-timeout", "2.5", "--health-port", "8081",
        "--stall-first-step-timeout", "120",
    )  # fmt: skip
    assert config.events == f"jsonl:{tmp_path / 'e.jsonl'}"
    assert config.metrics_cfg == {"tpelastic": "console"}
    assert (config.metrics_port, config.health_port) == (9100, 8081)
    assert config.timers and config.stall_timeout == 2.5
    assert config.stall_first_step_timeout == 120.0
    off = _config("--standalone")
    assert (off.events, off.metrics_port, off.health_port, off.stall_timeout) == (
        "null",
        None,
        None,
        None,
    )
    assert not off.timers and off.metrics_cfg == {}
    assert (off.metrics_host, off.health_host) == ("127.0.0.1", "127.0.0.1")


@pytest.mark.parametrize(
    ("value", "bound"),
    [
        ("9100", ("127.0.0.1", 9100)),
        ("0.0.0.0:9100", ("0.0.0.0", 9100)),
        (":9100", ("0.0.0.0", 9100)),
        ("[::]:9100", ("::", 9100)),
        ("node1.example:9100", ("node1.example", 9100)),
    ],
)
def test_endpoint_flags_take_a_host_and_port(value: str, bound: tuple[str, int]) -> None:
    metrics = _config("--standalone", "--metrics-addr", value)
    assert (metrics.metrics_host, metrics.metrics_port) == bound
    health = _config("--standalone", "--health-port", value)
    assert (health.health_host, health.health_port) == bound


def test_environment_variables_set_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPELASTIC_STALL_TIMEOUT", "7")
    monkeypatch.setenv("TPELASTIC_HEALTH_PORT", "8088")
    monkeypatch.setenv("TPELASTIC_TIMERS", "1")
    monkeypatch.setenv("TPELASTIC_EVENTS_FILE", "/tmp/x.jsonl")
    config = _config("--standalone")
    assert (config.stall_timeout, config.health_port, config.timers) == (7.0, 8088, True)
    assert config.events == "jsonl:/tmp/x.jsonl"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--stall-timeout", "0"), "--stall-timeout must be a positive number of seconds"),
        (("--stall-timeout", "soon"), "--stall-timeout must be a number of seconds"),
        (("--stall-first-step-timeout", "-1"), "--stall-first-step-timeout must be a positive"),
        (("--health-port", "70000"), "--health-port must be in 1..65535"),
        (("--metrics-port", "x"), "--metrics-port must be an integer"),
        (("--metrics-addr", "0.0.0.0:"), "no port after the host"),
        (("--health-addr", "::1:80"), "IPv6 address in brackets"),
        (("--health-addr", "h:0"), "--health-port must be"),
        (("--events", "console", "--events-file", "f"), "use one of --events and --events-file"),
    ],
)
def test_bad_flags_are_one_line_usage_errors(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        _config("--standalone", *argv)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"event_log_handler": "jsonl:"}, "event_log_handler must be null, console, logging or"),
        ({"event_log_handler": "syslog"}, "event_log_handler must be null, console, logging or"),
        ({"metrics_cfg": {"tpelastic": "prometheus"}}, "metrics for group 'tpelastic' must go"),
        ({"stall_timeout": -1}, "stall_timeout must be a positive number of seconds"),
        ({"health_port": 0}, "health_port must be a port number in 1..65535"),
    ],
)
def test_bad_settings_name_the_setting(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=1, rdzv_endpoint="h:1", **settings)


def test_a_taken_health_port_is_a_usage_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TPELASTIC_", "PET_"))}
        env["PYTHONPATH"] = str(REPO)
        done = subprocess.run(
            [sys.executable, "-m", "tpelastic", "run", "--standalone", "--health-port",
             str(port), WORKER],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
    assert done.returncode == 2
    assert "--health-port" in done.stderr and str(port) in done.stderr
    assert "Traceback" not in done.stderr
