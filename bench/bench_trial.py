"""One bounded benchmark trial: a store server process plus agent host processes, then a summary.

:func:`run_trial` starts every process it needs, releases all agents at once, collects one record
per agent, and kills what it started (by PID) when the trial's timeout passes. A trial that times
out, or whose server dies, is reported as such; it never hangs the run.
"""

from __future__ import annotations

import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from attrs import frozen

AGENTS = Path(__file__).with_name("bench_agents.py")
SETUP_SECONDS = 90.0  # importing tensorplay/torch and connecting thousands of clients


@frozen(kw_only=True)
class TrialSpec:
    """What to run: one implementation, one size, one scenario, and the knobs of the run."""

    impl: str
    size: int
    scenario: str = "none"  # none (convergence only), leave, crash, late
    timeout: float = 120.0
    per_process: int = 256
    heartbeat_interval: float = 5.0
    heartbeat_timeout: float = 15.0
    last_call: float = 30.0
    watch_interval: float = 0.0  # 0: the agent's look period
    watch_poll: bool = False
    switch_interval: float = 0.005


def _pump(proc: subprocess.Popen[str], name: str, sink: queue.Queue[tuple[str, str, str]]) -> None:
    stream: IO[str] | None = proc.stdout
    assert stream is not None
    for line in stream:
        tag, _, body = line.strip().partition(" ")
        if tag in ("PORT", "READY", "REC", "EVENT", "HOSTDONE"):
            sink.put((name, tag, body))
    sink.put((name, "EOF", ""))


class _Procs:
    """The processes of one trial, each with a reader thread feeding one queue."""

    def __init__(self, log: IO[str]) -> None:
        self.log = log
        self.lines: queue.Queue[tuple[str, str, str]] = queue.Queue()
        self.procs: dict[str, subprocess.Popen[str]] = {}

    def start(self, name: str, argv: list[str]) -> None:
        proc = subprocess.Popen(
            [sys.executable, str(AGENTS), *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        self.procs[name] = proc
        threading.Thread(target=_pump, args=(proc, name, self.lines), daemon=True).start()

    def next(self, until: float) -> tuple[str, str, str] | None:
        try:
            return self.lines.get(timeout=max(0.01, min(0.2, until - time.monotonic())))
        except queue.Empty:
            return None

    def send(self, name: str, text: str) -> None:
        proc = self.procs[name]
        try:
            assert proc.stdin is not None
            proc.stdin.write(text)
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died already; its missing records say so

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()  # only our own children, by PID
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass


def time_wait_sockets() -> int:
    """TCP sockets in TIME_WAIT on this host (the port budget the TCPStore burns)."""
    try:
        for line in Path("/proc/net/sockstat").read_text().splitlines():
            if line.startswith("TCP:"):
                fields = line.split()
                return int(fields[fields.index("tw") + 1])
    except (OSError, ValueError):
        pass
    return -1


def _host_args(spec: TrialSpec, port: int, first: int, count: int, role: str) -> list[str]:
    return [
        "host",
        *("--impl", spec.impl, "--port", str(port), "--size", str(spec.size)),
        *("--first", str(first), "--count", str(count), "--role", role),
        *("--scenario", spec.scenario, "--timeout", str(spec.timeout)),
        *("--heartbeat-interval", str(spec.heartbeat_interval)),
        *("--heartbeat-timeout", str(spec.heartbeat_timeout)),
        *("--last-call", str(spec.last_call), "--watch-interval", str(spec.watch_interval)),
        *(("--watch-poll",) if spec.watch_poll else ()),
        *("--switch-interval", str(spec.switch_interval)),
    ]


def _layout(spec: TrialSpec) -> list[tuple[int, int, str]]:
    """(first index, count, role) per host process; a victim or late joiner gets its own."""
    plain = spec.size - (1 if spec.scenario in ("leave", "crash") else 0)
    per_process = plain if spec.impl == "ours-memory" else spec.per_process
    hosts = [
        (first, min(per_process, plain - first), "agent") for first in range(0, plain, per_process)
    ]
    if spec.scenario in ("leave", "crash"):
        hosts.append((spec.size - 1, 1, spec.scenario))
    elif spec.scenario == "late":
        hosts.append((spec.size, 1, "late"))
    return hosts


def run_trial(spec: TrialSpec, log: IO[str]) -> dict[str, Any]:
    """Run one trial and return its summary (see :func:`summarize`).

    Never raises for a failed run: a timeout, a dead server or a host that did not start is the
    summary's ``status``. Every process it started is killed (by PID) before it returns.
    """
    procs = _Procs(log)
    records: dict[int, dict[str, Any]] = {}
    status, tw_peak, tw_start = "ok", 0, time_wait_sockets()
    hosts_done: list[dict[str, Any]] = []
    server_cpu: float | None = None
    load_before = os.getloadavg()[0]
    try:
        port = 0
        if spec.impl != "ours-memory":  # the in-process variant needs no server
            server = ["server", "--impl", spec.impl, "--timeout", str(3 * spec.timeout)]
            procs.start("server", server)
            port = _await_port(procs)
        hosts = _layout(spec)
        for first, count, role in hosts:
            procs.start(f"h{first}", _host_args(spec, port, first, count, role))
        _await_ready(procs, {f"h{first}" for first, _, _ in hosts})
        for first, _, _ in hosts:
            procs.send(f"h{first}", "go\n")
        deadline = time.monotonic() + spec.timeout + 5.0
        waiting = {f"h{first}" for first, _, _ in hosts}
        while waiting and time.monotonic() < deadline:
            tw_peak = max(tw_peak, time_wait_sockets())
            server_proc = procs.procs.get("server")
            if server_proc is not None and server_proc.poll() is not None:
                status = f"server died (exit {server_proc.returncode})"
                break
            item = procs.next(deadline)
            if item is None:
                continue
            name, tag, body = item
            if tag in ("REC", "EVENT"):
                data = json.loads(body)
                records.setdefault(data["index"], {}).update(data)
            elif tag == "HOSTDONE":
                hosts_done.append(json.loads(body))
                if hosts_done[-1].get("alive"):
                    status = "timeout"  # the host gave up on agents still joining at its deadline
                waiting.discard(name)
            elif tag == "EOF":
                waiting.discard(name)
        if waiting and status == "ok":
            status = "timeout"
        server_cpu = _cpu_seconds(procs.procs.get("server"))
    except TrialSetupError as error:
        status = f"setup failed: {error}"
    finally:
        procs.kill_all()
    summary = summarize(spec, list(records.values()), status)
    summary.update(time_wait_peak=tw_peak, time_wait_before=tw_start)
    # Where the CPU went (hosts: agents' threads; server: the store), and how busy the machine
    # was: other programs share these 2 cores, so read the times next to the load.
    summary.update(
        load_before=load_before,
        load_after=os.getloadavg()[0],
        hosts_cpu_s=sum(h.get("cpu_s", 0.0) for h in hosts_done),
        server_cpu_s=server_cpu,
        result_decodes=sum(h.get("result_decodes", 0) for h in hosts_done),
    )
    return summary


def _cpu_seconds(proc: Any) -> float | None:
    """User + system CPU seconds of a running process, or None."""
    if proc is None or proc.poll() is not None:
        return None
    try:
        import psutil

        times = psutil.Process(proc.pid).cpu_times()
    except Exception:  # gone, or psutil missing: the number is optional
        return None
    return float(times.user + times.system)


class TrialSetupError(Exception):
    """The server or a host did not come up within SETUP_SECONDS."""


def _await_port(procs: _Procs) -> int:
    until = time.monotonic() + SETUP_SECONDS
    while time.monotonic() < until:
        item = procs.next(until)
        if item and item[1] == "PORT":
            return int(json.loads(item[2])["port"])
        if item and item[1] == "EOF":
            raise TrialSetupError("the store server exited before listening")
    raise TrialSetupError("the store server did not start")


def _await_ready(procs: _Procs, names: set[str]) -> None:
    until = time.monotonic() + SETUP_SECONDS
    while names and time.monotonic() < until:
        item = procs.next(until)
        if item and item[1] == "READY":
            names.discard(item[0])
        elif item and item[1] == "EOF":
            raise TrialSetupError(f"agent host {item[0]} exited before it was ready")
    if names:
        raise TrialSetupError(f"{len(names)} agent host(s) not ready in {SETUP_SECONDS:g}s")


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _ops_total(ops: dict[str, int] | None) -> int:
    return sum(v for k, v in (ops or {}).items() if not k.startswith("cas_"))


def summarize(spec: TrialSpec, records: list[dict[str, Any]], status: str) -> dict[str, Any]:
    """Reduce per-agent records to the numbers the report shows."""
    out: dict[str, Any] = {
        "impl": spec.impl,
        "size": spec.size,
        "scenario": spec.scenario,
        "status": status,
        "agents_reported": len(records),
    }
    errors = sorted({r["error"] for r in records if "error" in r})
    out["errors"] = errors[:5]
    joined = [r for r in records if "t_done" in r]
    out["joined"] = len(joined)
    calls = [r["t_call"] for r in records if "t_call" in r]
    if joined and calls:
        out["last_join_call_to_all_done_s"] = max(r["t_done"] for r in joined) - max(calls)
        out["first_call_to_all_done_s"] = max(r["t_done"] for r in joined) - min(calls)
    ops = [_ops_total(r.get("ops")) for r in joined]
    closers = [_ops_total(r.get("ops")) for r in joined if r.get("closer")]
    followers = [_ops_total(r.get("ops")) for r in joined if not r.get("closer")]
    out["ops_per_agent_median"] = _median([float(x) for x in ops])
    out["ops_per_agent_max"] = max(ops) if ops else None
    out["ops_follower_max"] = max(followers) if followers else None
    out["ops_closer"] = closers[0] if closers else None
    cas = [r.get("ops", {}) for r in joined]
    won = sum(c.get("cas_won", 0) for c in cas)
    lost = sum(c.get("cas_failed", 0) for c in cas)
    out["cas_failed_fraction"] = lost / (won + lost) if won + lost else None
    ranks = sorted(r["rank"] for r in joined if "rank" in r)
    out["ranks_ok"] = ranks == list(range(spec.size)) and len(joined) == spec.size
    if spec.scenario != "none":
        out.update(_rerendezvous(spec, records))
    if status == "ok" and not out["ranks_ok"]:
        out["status"] = "incomplete"
    return out


def _rerendezvous(spec: TrialSpec, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Time from the event (leave, kill, late join call) until every survivor has its new round."""
    events = [r["t_event"] for r in records if "t_event" in r]
    again = [r for r in records if "t_done1" in r]
    expected = spec.size - 1 if spec.scenario in ("leave", "crash") else spec.size + 1
    out: dict[str, Any] = {"rejoined": len(again), "rejoin_expected": expected}
    if events and again:
        times = [r["t_done1"] - events[0] for r in again]
        out["event_to_all_rejoined_s"] = max(times)
        out["event_to_median_rejoined_s"] = statistics.median(times)
    worlds = {r.get("world1") for r in again}
    out["new_world_sizes"] = sorted(w for w in worlds if w is not None)
    out["rejoin_ops_follower_max"] = max(
        (_ops_total(r.get("ops1")) for r in again if not r.get("closer1")), default=None
    )
    out["rejoin_ops_closer"] = next(
        (_ops_total(r.get("ops1")) for r in again if r.get("closer1")), None
    )
    watch = [r["watch_ops"] for r in records if "watch_ops" in r]
    out["watch_ops_per_agent_median"] = _median([float(w) for w in watch])
    out["rerendezvous_ok"] = len(again) == expected and out["new_world_sizes"] == [expected]
    return out
