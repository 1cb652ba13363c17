"""What the agents do when the agent that hosts the store is killed or paused.

Three ``tpelastic run`` agents on 127.0.0.1 (c10d, ``--nnodes=1:3 --nproc-per-node=2``,
``--max-restarts=3 --monitor-interval=0.1``, the issue's rendezvous settings: join_timeout=20,
last_call_timeout=3, keep_alive_interval=1, keep_alive_max_attempt=3, so the keep-alive expiry
is 3 s); the first started hosts the store; the workers hold for ``--hold`` seconds. Per trial:

* ``kill``: SIGKILL of the store host once the world of 6 trains. Reports, per survivor, the
  seconds from the kill to its exit (target: within the expiry plus a few seconds), from its
  outcome line to its exit (target: <= 2 s), its exit code, whether the outcome line names the
  fix, and processes left behind (target: none).
* ``stop``: SIGSTOP of the store host for the expiry + 3 s (6 s), then SIGCONT. Reports every
  agent's exit code (target: all 0: the job goes on) and the lines the survivors logged.

    python bench/store_host_loss.py --mode kill --trials 3
    python bench/store_host_loss.py --mode stop --trials 3
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "e2e" / "scripts" / "worker.py"
CONF = "join_timeout=20,last_call_timeout=3,keep_alive_interval=1,keep_alive_max_attempt=3"
EXPIRY = 3.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _agent(port: int, log: Path, out: Path, hold: float) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    argv = [
        sys.executable, "-m", "tpelastic", "run", "--nnodes=1:3", "--nproc-per-node=2",
        "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=store-host-loss",
        "--local-addr=127.0.0.1", f"--rdzv-conf={CONF}", "--monitor-interval=0.1",
        "--max-restarts=3", str(WORKER), "--out", str(out), "--hold", str(hold),
    ]  # fmt: skip
    with open(log, "wb") as sink:
        return subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env)


def _outcome(log: Path) -> str | None:
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("tpelastic: job failed"):
            return line
    return None


def trial(mode: str, folder: Path, hold: float) -> dict[str, object]:
    out = folder / "out"
    out.mkdir()
    port = _free_port()
    logs = [folder / f"agent{i}.log" for i in range(3)]
    host = _agent(port, logs[0], out, hold)
    until = time.monotonic() + 30
    while not any(c.laddr.port == port for c in psutil.Process(host.pid).net_connections("tcp")):
        if time.monotonic() > until:
            raise SystemExit(f"the host never listened:\n{logs[0].read_text()}")
        time.sleep(0.05)
    agents = [host] + [_agent(port, logs[i], out, hold) for i in (1, 2)]
    until = time.monotonic() + 60
    while len(list(out.glob("r*_rank*_pid*.json"))) < 6:
        if time.monotonic() > until:
            raise SystemExit("the world of 6 never formed")
        time.sleep(0.05)
    tree = [p.pid for a in agents for p in psutil.Process(a.pid).children(recursive=True)]
    start = time.monotonic()
    if mode == "kill":
        host.send_signal(signal.SIGKILL)
    else:
        host.send_signal(signal.SIGSTOP)
        time.sleep(EXPIRY + 3.0)
        host.send_signal(signal.SIGCONT)
    ended: dict[int, float] = {}
    outcome_at: dict[int, float] = {}
    limit = 60.0 if mode == "kill" else hold + 90.0
    while len(ended) < 3 and time.monotonic() - start < limit:
        for i, agent in enumerate(agents):
            if i not in outcome_at and _outcome(logs[i]) is not None:
                outcome_at[i] = time.monotonic()
            if i not in ended and agent.poll() is not None:
                ended[i] = time.monotonic()
        time.sleep(0.01)
    for agent in agents:
        if agent.poll() is None:
            agent.send_signal(signal.SIGCONT)
            agent.kill()
            agent.wait()
    time.sleep(0.5)
    result: dict[str, object] = {"codes": [a.returncode for a in agents]}
    result["left_behind"] = [pid for pid in tree if psutil.pid_exists(pid)]
    if mode == "kill":
        result["kill_to_exit"] = [
            round(ended[i] - start, 2) if i in ended else None for i in (1, 2)
        ]
        result["outcome_to_exit"] = [
            round(ended[i] - outcome_at[i], 2) if i in ended and i in outcome_at else None
            for i in (1, 2)
        ]
        result["names_fix"] = [
            bool((line := _outcome(logs[i])) and "tpelastic store" in line and "etcd" in line)
            for i in (1, 2)
        ]
    else:
        result["survivor_lines"] = [
            [ln for ln in logs[i].read_text(errors="replace").splitlines() if "tcp store" in ln]
            for i in (1, 2)
        ]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("kill", "stop"), default="kill")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--hold", type=float, default=None, help="workers' hold (s)")
    args = parser.parse_args()
    hold = args.hold if args.hold is not None else (120.0 if args.mode == "kill" else 20.0)
    print(f"load before: {os.getloadavg()[0]:.2f}", flush=True)
    for n in range(args.trials):
        with tempfile.TemporaryDirectory(prefix="tpelastic-store-loss-") as folder:
            found = trial(args.mode, Path(folder), hold)
        print(f"trial {n} ({args.mode}, load {os.getloadavg()[0]:.2f}): {found}", flush=True)


if __name__ == "__main__":
    main()
