"""Real ``tpelastic run`` agents waiting in a rendezvous on 127.0.0.1, for writing hostile or
damaged bytes under their keys and judging how every one of them ends."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
from attrs import frozen

from tpelastic.adapters.stores import StoreUnavailable
from tpelastic.adapters.stores.tcp_client import TcpStoreClient
from tpelastic.core.rendezvous.keys import RunKeys

REPO = Path(__file__).resolve().parents[2]
HOLD = str(REPO / "tests" / "e2e" / "scripts" / "hold_world.py")
MIB = 1024 * 1024
# An agent is a Python process with tpelastic loaded; a record that makes one grow past this is
# a memory bomb.
AGENT_RSS_BOUND = 300 * MIB
# Heartbeats every 0.3 s; a node is dead, and a lost store gone, after 9 s: long enough that an
# agent which learnt of the end only by losing the store would end seconds after the others.
CONF = (
    "keep_alive_interval=0.3,keep_alive_max_attempt=30,last_call_timeout=0.5,"
    "join_timeout=40,read_timeout=20"
)
FAILED_LINE = "tpelastic: job failed"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@frozen
class Ending:
    """How one agent ended: exit code, seconds after the write, its log."""

    code: int | None
    after: float | None
    log: str

    @property
    def failed_lines(self) -> list[str]:
        return [line for line in self.log.splitlines() if line.startswith(FAILED_LINE)]


class WaitingAgents:
    """Agents of one run, ``--nnodes 3``: on the store at ``port`` (a ``tpelastic store``), or
    without one, the first hosting the store at a free port."""

    def __init__(self, folder: Path, run_id: str, port: int | None = None) -> None:
        self.folder = folder
        self.run_id = run_id
        self.keys = RunKeys(run_id)
        self.port = free_port() if port is None else port
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        self.peak_rss = 0
        (folder / "out").mkdir(parents=True, exist_ok=True)

    def start(self) -> None:
        log = self.folder / f"agent{len(self.procs)}.log"
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        argv = [
            sys.executable, "-m", "tpelastic", "run", "--nnodes", "3", "--nproc-per-node", "1",
            "--rdzv-backend", "tcp", "--rdzv-endpoint", f"127.0.0.1:{self.port}",
            "--rdzv-id", self.run_id, "--local-addr", "127.0.0.1", "--rdzv-conf", CONF,
            "--monitor-interval", "0.1", HOLD, str(self.folder / "out"), "0.5",
        ]  # fmt: skip
        with open(log, "wb") as sink:
            self.procs.append(
                subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env)
            )
        self.logs.append(log)

    def client(self) -> TcpStoreClient:
        return TcpStoreClient("127.0.0.1", self.port, timeout=10.0)

    def wait_registered(self, count: int, within: float = 90.0) -> TcpStoreClient:
        """Block until ``count`` agents hold written slots of round 0; a client of the store."""
        store = self.client()
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            try:
                slots = [store.get(self.keys.slot(0, i)) for i in range(count)]
                if all(slot is not None for slot in slots):
                    return store
            except StoreUnavailable:
                pass
            self._sample()
            time.sleep(0.1)
        store.close()
        raise AssertionError(f"{count} agents did not register: {self.tails()}")

    def wait_all(self, started: float, within: float) -> list[Ending]:
        """Wait for every agent to exit (at most ``within`` s after ``started``)."""
        ends: dict[int, float] = {}
        while len(ends) < len(self.procs) and time.monotonic() < started + within:
            for index, proc in enumerate(self.procs):
                if index not in ends and proc.poll() is not None:
                    ends[index] = time.monotonic() - started
            self._sample()
            time.sleep(0.05)
        return [
            Ending(code=proc.poll(), after=ends.get(index), log=log.read_text(errors="replace"))
            for index, (proc, log) in enumerate(zip(self.procs, self.logs, strict=True))
        ]

    def leftovers(self) -> list[psutil.Process]:
        """Processes of this run (agents or their workers) still alive."""
        marker = str(self.folder / "out")
        found = []
        for proc in psutil.process_iter(["cmdline", "status"]):
            try:
                if proc.info["status"] == psutil.STATUS_ZOMBIE:
                    continue
                if any(marker in part for part in proc.info["cmdline"] or ()):
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return found

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
        for proc in self.leftovers():
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass

    def tails(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text()[-1500:]}" for log in self.logs)

    def _sample(self) -> None:
        for proc in self.procs:
            try:
                rss = psutil.Process(proc.pid).memory_info().rss
            except psutil.NoSuchProcess:
                continue
            self.peak_rss = max(self.peak_rss, int(rss))
