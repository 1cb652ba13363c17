"""Does a SIGSTOP of one agent end the job? Three real agents on 127.0.0.1, the issue's settings.

``--nnodes=1:3 --nproc-per-node=2 --max-restarts=3 --monitor-interval=0.1`` with
``keep_alive_interval=1,keep_alive_max_attempt=3`` (so the target pause is 1 x 3 + 3 = 6 s). The
workers (tests/e2e/scripts/worker.py) all_reduce for 20 s. Agent ``--victim`` (0 hosts the store
on c10d; on etcd none does) is stopped for ``--pause`` seconds once every worker trained, then
continued. Prints each agent's exit code and the rounds that trained; the target is every code 0.

    python bench/pause_availability.py --victim 0 --pause 6
    python bench/pause_availability.py --victim 1 --pause 6 --backend etcd --endpoint 127.0.0.1:2379
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

REPO = Path(__file__).resolve().parents[1]
CONF = "join_timeout=20,last_call_timeout=3,keep_alive_interval=1,keep_alive_max_attempt=3"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--victim", type=int, default=0, choices=(0, 1, 2))
    parser.add_argument("--pause", type=float, default=6.0)
    parser.add_argument("--backend", default="c10d")
    parser.add_argument("--endpoint", default="", help="default: a free port on 127.0.0.1")
    args = parser.parse_args()
    endpoint = args.endpoint
    if not endpoint:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            endpoint = f"127.0.0.1:{probe.getsockname()[1]}"
    folder = Path(tempfile.mkdtemp(prefix="tpelastic-pause-"))
    records = folder / "records"
    records.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    run_id = f"pause-{os.getpid()}"

    def agent(index: int) -> subprocess.Popen[bytes]:
        command = [
            *(sys.executable, "-m", "tpelastic", "run", "--nnodes=1:3", "--nproc-per-node=2"),
            f"--rdzv-backend={args.backend}",
            f"--rdzv-endpoint={endpoint}",
            f"--rdzv-id={run_id}",
            *("--local-addr=127.0.0.1", "--max-restarts=3", "--monitor-interval=0.1"),
            *("--rdzv-conf", CONF),
            str(REPO / "tests/e2e/scripts/worker.py"),
            *("--out", str(records), "--train-for", "20"),
        ]
        with open(folder / f"agent{index}.log", "wb") as log:
            return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)

    agents = [agent(0)]
    time.sleep(1.0)  # agent 0 comes first: on c10d it hosts the store
    agents += [agent(1), agent(2)]
    deadline = time.monotonic() + 60
    while len(list(records.glob("*.json"))) < 6 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2.0)
    victim = agents[args.victim].pid
    os.kill(victim, signal.SIGSTOP)
    time.sleep(args.pause)
    os.kill(victim, signal.SIGCONT)
    codes: list[int | str] = []
    for proc in agents:
        try:
            codes.append(proc.wait(timeout=120))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.append("hang")
    rounds = sorted({path.name.split("_")[0] for path in records.glob("*.json")})
    print(
        f"backend={args.backend} victim={args.victim} pause={args.pause:g}s "
        f"exit codes={codes} rounds={rounds} logs={folder}"
    )
    return 0 if codes == [0, 0, 0] else 1


if __name__ == "__main__":
    sys.exit(main())
