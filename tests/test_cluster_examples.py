"""The cluster guide's examples stay valid: the Kubernetes manifest's ``tpelastic run`` command
parses with the real parser and asks for what docs/clusters.md says (etcd, one endpoint for
metrics and probes on every address)."""

from __future__ import annotations

import re
from pathlib import Path

from tpelastic.cli.run import config_from_args, parse_args

REPO = Path(__file__).resolve().parents[1]


def test_kubernetes_manifest_command_parses() -> None:
    text = (REPO / "examples" / "kubernetes" / "train-elastic.yaml").read_text()
    block = text.split("- tpelastic\n", 1)[1].split("env:", 1)[0]
    argv = [m.strip() for m in re.findall(r"^\s+- (\S+)", block, flags=re.M)]
    assert argv[0] == "run"
    argv = [a.replace("$(POD_IP)", "10.1.2.3") for a in argv[1:]]
    config = config_from_args(parse_args(argv))
    assert (config.min_nodes, config.max_nodes, config.rdzv_backend) == (2, 4, "etcd")
    assert (config.metrics_host, config.metrics_port) == ("0.0.0.0", 9100)
    assert config.local_addr == "10.1.2.3"
    for probe in ("path: /health, port: 9100", "path: /healthz, port: 9100"):
        assert probe in text
