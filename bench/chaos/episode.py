"""One episode: real agents of one launcher on 127.0.0.1, a seeded schedule of faults, the end.

Every process of an episode carries ``CHAOS_EPISODE=<token>`` in its environment (the agents get
it, their workers inherit it), so the final sweep finds whatever the episode started, whoever its
parent is now. Agents run in sessions of their own, on addresses 127.0.0.2, 127.0.0.3, ... (all
loopback) given as ``--local-addr``; the store is the c10d endpoint 127.0.0.1:<free port>, hosted
by whichever agent binds it first (found by its listening socket).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from chaos import checks, timeline
from chaos.schedule import (
    KILL_NODE,
    KILL_WORKER,
    NEW_NODE,
    OWN,
    STOP_AGENT,
    STOP_HOST,
    TERM_AGENT,
    Fault,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WORKER = HERE / "worker.py"
PY = sys.executable
SPARE_NAME = "tp-warm-spare"  # tpelastic's warm interpreters until they become workers


@dataclass(frozen=True)
class Launcher:
    name: str
    module: str
    framework: str  # what the worker imports
    budget_scope: str  # "job": one budget for the job; "node": each agent counts its own


LAUNCHERS = {
    "tpelastic": Launcher("tpelastic", "tpelastic.run", "tensorplay", "job"),
    "torchrun": Launcher("torchrun", "torch.distributed.run", "torch", "node"),
    "tensorplay-run": Launcher(
        "tensorplay-run", "tensorplay.distributed.run", "tensorplay", "node"
    ),
}

RDZV_CONF = "join_timeout=20,last_call_timeout=3,keep_alive_interval=1,keep_alive_max_attempt=3"


@dataclass(frozen=True)
class Settings:
    duration: float = 60.0  # faults, then the stop file at this many s after training starts
    nodes: int = 3
    nnodes: str = "1:3"
    nproc: int = 2
    max_restarts: int = 3
    monitor_interval: float = 0.1
    rdzv_conf: str = RDZV_CONF
    warm_timeout: float = 120.0  # launch -> every initial rank training
    grace: float = 60.0  # stop file -> every agent gone, or the episode hung
    exit_grace: float = 5.0  # last agent gone -> a process still alive is an orphan
    step_time: float = 0.1

    @property
    def max_nodes(self) -> int:
        return int(self.nnodes.split(":")[-1])


@dataclass
class Node:
    name: str
    addr: str
    proc: subprocess.Popen[bytes]
    log: Path
    started: float
    signalled: str = ""  # "kill" or "term" when the harness ended it on purpose
    stopped_until: float = 0.0  # SIGSTOPped until then
    exited: float = 0.0
    code: int | None = None

    @property
    def alive(self) -> bool:
        return self.code is None


@dataclass
class Episode:
    launcher: Launcher
    seed: int
    faults: list[Fault]
    settings: Settings
    folder: Path
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    nodes: list[Node] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    tracked: dict[int, psutil.Process] = field(default_factory=dict)
    host: str = ""
    port: int = 0

    # -- processes ------------------------------------------------------------------------

    def start_node(self) -> Node:
        index = len(self.nodes)
        name, addr = f"n{index}", f"127.0.0.{index + 2}"
        s = self.settings
        argv = [
            PY,
            "-m",
            self.launcher.module,
            f"--nnodes={s.nnodes}",
            f"--nproc-per-node={s.nproc}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{self.port}",
            f"--rdzv-id=chaos-{self.seed}",
            f"--max-restarts={s.max_restarts}",
            f"--monitor-interval={s.monitor_interval}",
            f"--rdzv-conf={s.rdzv_conf}",
            f"--local-addr={addr}",
            str(WORKER),
        ]
        env = {
            **os.environ,
            "CHAOS_EPISODE": self.token,
            "CHAOS_NODE": name,
            "CHAOS_FRAMEWORK": self.launcher.framework,
            "CHAOS_OUT": str(self.folder / "lines"),
            "CHAOS_CHECKPOINT": str(self.folder / "checkpoint.json"),
            "CHAOS_STOP": str(self.folder / "stop"),
            "CHAOS_STEP_TIME": str(s.step_time),
            "OMP_NUM_THREADS": "1",
            "LOGLEVEL": os.environ.get("LOGLEVEL", "INFO"),  # torchrun's agents say what they do
            "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        }
        log = self.folder / "nodes" / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        node = Node(name=name, addr=addr, proc=proc, log=log, started=time.monotonic())
        self.nodes.append(node)
        self.tracked[proc.pid] = psutil.Process(proc.pid)
        self.event("start", node=name, pid=proc.pid)
        return node

    def event(self, kind: str, **details: Any) -> None:
        self.events.append({"t": time.monotonic(), "kind": kind, **details})

    def poll(self) -> None:
        now = time.monotonic()
        for node in self.nodes:
            if node.alive and node.proc.poll() is not None:
                node.code, node.exited = node.proc.returncode, now
                self.event("exit", node=node.name, code=node.code, signalled=node.signalled)
            if node.stopped_until and now >= node.stopped_until:
                self.signal(node.proc.pid, signal.SIGCONT)
                node.stopped_until = 0.0
                self.event("cont", node=node.name)
            if node.alive:
                for child in descendants(node.proc.pid):
                    self.tracked.setdefault(child.pid, child)

    def workers(self, node: Node) -> list[psutil.Process]:
        found = []
        for proc in descendants(node.proc.pid):
            try:
                # A waiting warm interpreter names the script too, but is no worker yet.
                if str(WORKER) in proc.cmdline() and proc.name() != SPARE_NAME:
                    found.append(proc)
            except psutil.Error:
                pass
        return sorted(found, key=lambda p: p.pid)

    def signal(self, pid: int, sig: signal.Signals) -> bool:
        try:
            os.kill(pid, sig)
            return True
        except ProcessLookupError:
            return False

    def find_host(self, timeout: float) -> str:
        """The node whose process tree listens on the store's port."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for node in self.nodes:
                family = [node.proc.pid, *(p.pid for p in descendants(node.proc.pid))]
                for pid in family:
                    try:
                        conns = psutil.Process(pid).net_connections(kind="tcp")
                    except psutil.Error:
                        continue
                    if any(
                        c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == self.port
                        for c in conns
                    ):
                        return node.name
            self.poll()
            if not any(n.alive for n in self.nodes):
                return ""
            time.sleep(0.1)
        return ""

    # -- faults ---------------------------------------------------------------------------

    def live(self, *, hosts: bool) -> list[Node]:
        return [
            n
            for n in self.nodes
            if n.alive and not n.stopped_until and (hosts or n.name != self.host)
        ]

    def inject(self, fault: Fault) -> dict[str, Any]:
        base = {"fault": fault.kind, "planned": fault.at}

        def pick(items: list[Any]) -> Any:
            return items[min(int(fault.pick * len(items)), len(items) - 1)]

        if fault.kind == KILL_WORKER:
            # A fault due while no worker runs (a recovery under way) waits a little for one.
            deadline = time.monotonic() + 3.0
            candidates: list[tuple[Node, psutil.Process]] = []
            while not candidates and time.monotonic() < deadline:
                candidates = [(n, w) for n in self.live(hosts=True) for w in self.workers(n)]
                if not candidates:
                    time.sleep(0.1)
                    self.poll()
            if not candidates:
                return {**base, "skipped": "no worker running"}
            node, worker = pick(candidates)
            t = time.monotonic()
            self.signal(worker.pid, signal.SIGKILL)
            return {**base, "t": t, "node": node.name, "pid": worker.pid}
        if fault.kind in (KILL_NODE, TERM_AGENT, STOP_AGENT):
            candidates_n = self.live(hosts=False)
            if fault.kind != STOP_AGENT and len([n for n in self.nodes if n.alive]) < 2:
                return {**base, "skipped": "only one node alive"}
            if not candidates_n:
                return {**base, "skipped": "no node to pick"}
            node = pick(candidates_n)
        elif fault.kind == STOP_HOST:
            hosts = [n for n in self.live(hosts=True) if n.name == self.host]
            if not hosts:
                return {**base, "skipped": "the store's host is gone"}
            node = hosts[0]
        elif fault.kind == NEW_NODE:
            if len([n for n in self.nodes if n.alive]) >= self.settings.max_nodes:
                return {**base, "skipped": "at the maximum of nodes"}
            t = time.monotonic()
            node = self.start_node()
            return {**base, "t": t, "node": node.name, "pid": node.proc.pid}
        else:
            raise ValueError(fault.kind)
        t = time.monotonic()
        if fault.kind == KILL_NODE:
            family = [node.proc.pid, *(p.pid for p in descendants(node.proc.pid))]
            family += [pid for pid, p in self.tracked.items() if _of_node(p, node.name)]
            node.signalled = "kill"
            for pid in dict.fromkeys(family):
                self.signal(pid, signal.SIGKILL)
        elif fault.kind == TERM_AGENT:
            node.signalled = "term"
            self.signal(node.proc.pid, signal.SIGTERM)
        else:
            self.signal(node.proc.pid, signal.SIGSTOP)
            node.stopped_until = t + fault.pause
        return {**base, "t": t, "node": node.name, "pid": node.proc.pid}

    # -- the episode ----------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        s = self.settings
        shutil.rmtree(self.folder, ignore_errors=True)
        (self.folder / "lines").mkdir(parents=True)
        (self.folder / "nodes").mkdir()
        self.port = free_port()
        wall_minus_mono = time.time() - time.monotonic()  # agents stamp lines in wall time
        launched = time.monotonic()
        injected: list[dict[str, Any]] = []
        t0 = deadline = 0.0
        try:
            # All at once, as a job's nodes start: whichever binds the port first hosts it.
            for _ in range(s.nodes):
                self.start_node()
            self.host = self.find_host(s.warm_timeout)
            t0 = self.wait_warm(launched + s.warm_timeout)
            if t0:
                self.event("warm", after=t0 - launched)
                deadline = t0 + s.duration + s.grace
                pending = list(self.faults)
                stop_at = t0 + s.duration
                stopped = False
                while any(n.alive for n in self.nodes) and time.monotonic() < deadline:
                    self.poll()
                    now = time.monotonic()
                    while pending and now >= t0 + pending[0].at:
                        injected.append(self.inject(pending.pop(0)))
                        self.event("fault", **injected[-1])
                    if not stopped and now >= stop_at:
                        (self.folder / "stop").touch()
                        self.event("stop")
                        stopped = True
                    time.sleep(0.05)
            ended = time.monotonic()
            self.poll()
            hung = [n.name for n in self.nodes if n.alive]
            orphans = self.sweep(hung)
        finally:
            self.kill_everything()
        lines = checks.read_lines(self.folder / "lines")
        result = checks.judge(
            lines=lines,
            injected=injected,
            nodes=[
                {
                    "name": n.name,
                    "code": n.code,
                    "signalled": n.signalled,
                    "exited": n.exited,
                    "started": n.started,
                }
                for n in self.nodes
            ],
            hung=hung,
            orphans=orphans,
            warm=bool(t0),
            max_restarts=s.max_restarts,
            budget_scope=self.launcher.budget_scope,
            own=OWN,
        )
        agents = timeline.agent_lines(self.folder / "nodes", wall_minus_mono)
        marks = timeline.timelines(lines, injected, checks.worlds(lines), agents)
        result.update(
            timeline=marks,
            wall_minus_mono=wall_minus_mono,
            launcher=self.launcher.name,
            seed=self.seed,
            host=self.host,
            t0=t0,
            wall=ended - launched,
            faults=[_rel(f, t0) for f in injected],
            events=[_rel(e, t0) for e in self.events],
        )
        (self.folder / "result.json").write_text(json.dumps(result, indent=1))
        return result

    def wait_warm(self, deadline: float) -> float:
        """When every initial rank trains in one world (0.0 if not before ``deadline``)."""
        want = self.settings.nodes * self.settings.nproc
        while time.monotonic() < deadline:
            self.poll()
            if not any(n.alive for n in self.nodes):
                return 0.0
            worlds = checks.worlds(checks.read_lines(self.folder / "lines"))
            if any(w.size == want and len(w.first_by_rank) == want for w in worlds.values()):
                return time.monotonic()
            time.sleep(0.2)
        return 0.0

    def ours(self) -> list[psutil.Process]:
        found = []
        for proc in list(self.tracked.values()):
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        seen = {p.pid for p in found}
        for proc in psutil.process_iter():
            if proc.pid in seen or proc.pid == os.getpid():
                continue
            try:
                if proc.environ().get("CHAOS_EPISODE") == self.token:
                    if proc.status() != psutil.STATUS_ZOMBIE:
                        found.append(proc)
            except psutil.Error:
                pass
        return found

    def sweep(self, hung: list[str]) -> list[dict[str, Any]]:
        """What the episode started and is still alive ``exit_grace`` s after its agents went
        (with a hang: now, leaving out the hung agents' own trees)."""
        if not hung:
            until = time.monotonic() + self.settings.exit_grace
            while time.monotonic() < until and self.ours():
                time.sleep(0.2)
        keep = set()
        for node in self.nodes:
            if node.name in hung:
                keep |= {node.proc.pid, *(p.pid for p in descendants(node.proc.pid))}
        orphans = []
        for proc in self.ours():
            if proc.pid in keep:
                continue
            try:
                orphans.append(
                    {
                        "pid": proc.pid,
                        "node": proc.environ().get("CHAOS_NODE", "?"),
                        "cmd": " ".join(proc.cmdline())[-160:],
                    }
                )
            except psutil.Error:
                pass
        return orphans

    def kill_everything(self) -> None:
        for node in self.nodes:
            if node.alive:
                self.signal(node.proc.pid, signal.SIGCONT)
        for _ in range(3):
            procs = self.ours()
            if not procs:
                break
            for proc in procs:
                try:
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
                except psutil.Error:
                    pass
            psutil.wait_procs(procs, timeout=3)
        for node in self.nodes:
            try:
                node.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            if node.code is None:
                node.code = node.proc.returncode


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _of_node(proc: psutil.Process, name: str) -> bool:
    try:
        return proc.is_running() and proc.environ().get("CHAOS_NODE") == name
    except psutil.Error:
        return False


def _rel(item: dict[str, Any], t0: float) -> dict[str, Any]:
    out = dict(item)
    if "t" in out and t0:
        out["t"] = round(out["t"] - t0, 3)
    return out


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
