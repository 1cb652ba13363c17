"""Conformance machine for RendezvousHandler implementations (see docs/testing-handlers.md).

:class:`HandlerConformance` is a hypothesis ``RuleBasedStateMachine`` that runs up to ``slots``
agents, each a real process (:mod:`tpelastic.testing.handler_agent`) around one handler built by
your factory, and drives them with joins, graceful leaves, crashes (SIGKILL: no goodbye, no more
heartbeats) and pauses (SIGSTOP for a while, then SIGCONT). It checks the invariants of
``specs/handler_contract.md``:

* H1 agreement: every member of a round sees the same world size and membership;
* H2 ranks: a round's ranks are 0..n-1, one node each, and min_nodes <= n <= max_nodes;
* H3 one world at a time: no two rounds train at the same instant (a new round trains only after
  every member of the previous one joined it, left, or may have been declared dead);
* H4 sticky ranks (when promised): a member of round r keeps its rank in round r+1 if it exists;
* H5 liveness: with at least min_nodes agents up, all of them (up to max_nodes) train in one
  round within ``liveness_bound`` seconds;
* H6 never give up: no agent fails its rendezvous while at least min_nodes agents are up.

Build a machine for your handler with :func:`handler_conformance_machine` and run its
``TestCase``; a failure prints as a short script of rule calls that replays it. Every step is
bounded (``step_timeout``), every agent dies after ``hard_timeout`` and with its parent, and
teardown kills every agent the machine started, by PID: the machine never hangs a test run.

Needs ``hypothesis`` (the ``test`` extra).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from typing import IO, Any

from attrs import define, field, frozen
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tpelastic.adapters.clock import SYSTEM_CLOCK

Options = Mapping[str, Any]

_STARTUP_TIMEOUT = 60.0  # a Python start on a loaded 2-core machine can take seconds
_UP = ("starting", "joining", "training", "leaving")
_QUIET_AFTER = 0.3  # a checkpoint pumps this long before judging the intervals


class ConformanceViolation(AssertionError):
    """A handler broke an invariant; the message starts with its id (``H1`` .. ``H6``)."""

    def __init__(self, ident: str, message: str) -> None:
        super().__init__(f"{ident}: {message}")
        self.ident = ident


@frozen(kw_only=True)
class _Interval:
    """A slot trained in world ``key`` from ``start`` to ``end`` (None: still training)."""

    slot: int
    key: tuple[Any, ...]
    start: float
    end: float | None


@define
class _World:
    key: tuple[Any, ...]
    size: int
    participants: tuple[str, ...] | None
    order: int  # when the machine first saw a result of it
    ranks: dict[int, int] = field(factory=dict)  # slot -> rank


@define
class _Agent:
    """One agent process and what the machine knows of it."""

    slot: int
    proc: subprocess.Popen[str]
    status: str = "starting"  # joining, training, leaving, left, crashed, gave_up, exited
    started: bool = False
    node_id: str | None = None
    seq: int = -1
    key: tuple[Any, ...] | None = None  # the world it trains in
    round_no: int | None = None
    rank: int | None = None
    since: float = 0.0
    last_round: tuple[int | None, int, int] | None = None  # (round, rank, seq) of its last result
    paused_long_at: float | None = None
    told_rejoin: set[int] = field(factory=set)

    @property
    def up(self) -> bool:
        return self.status in ("starting", "joining", "training")

    def send(self, line: str) -> None:
        stdin: IO[str] | None = self.proc.stdin
        if stdin is None or self.proc.poll() is not None:
            return
        try:
            stdin.write(line + "\n")
            stdin.flush()
        except (BrokenPipeError, OSError):
            pass


class HandlerConformance(RuleBasedStateMachine):
    """Drive agents around a handler with faults and check H1..H6 (see the module docstring).

    Configure a subclass with :func:`handler_conformance_machine`; the class attributes below are
    its settings.
    """

    factory: str = "tpelastic.testing.handler_spec:builtin_handler"
    options: Options | Callable[[], Options] = {}
    slots: int = 3
    min_nodes: int = 1
    max_nodes: int = 3
    initial: int = 2
    elastic: bool = True
    sticky_ranks: bool = False
    dead_after: float = 1.0
    liveness_bound: float = 20.0
    step_timeout: float = 10.0
    hard_timeout: float = 300.0
    poll: float = 0.05
    pythonpath: tuple[str, ...] = ()

    def __init__(self) -> None:
        super().__init__()
        options = type(self).options  # through the class: a function stays unbound
        self.run_options = dict(options() if callable(options) else options)
        self.agents: dict[int, _Agent] = {}
        self.retired: list[_Agent] = []  # agents gone from their slot (kept to kill at teardown)
        self.events: queue.Queue[tuple[int, dict[str, Any]]] = queue.Queue()
        self.worlds: dict[tuple[Any, ...], _World] = {}
        self.intervals: list[_Interval] = []
        self.violations: list[ConformanceViolation] = []
        self.log: list[str] = []
        self.failed = False  # a violation was raised: teardown only cleans up

    # --- processes ------------------------------------------------------------------------------

    def _spawn(self, slot: int, *, gated: bool) -> _Agent:
        config = {
            "factory": self.factory,
            "slot": slot,
            "min_nodes": self.min_nodes,
            "max_nodes": self.max_nodes,
            "options": self.run_options,
            "hard_timeout": self.hard_timeout,
            "poll": self.poll,
            "gated": gated,
        }
        env = dict(os.environ)
        if self.pythonpath:
            env["PYTHONPATH"] = os.pathsep.join((*self.pythonpath, env.get("PYTHONPATH", "")))
        proc = subprocess.Popen(
            [sys.executable, "-m", "tpelastic.testing.handler_agent", json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        agent = _Agent(slot=slot, proc=proc)
        self.agents[slot] = agent
        threading.Thread(target=self._read, args=(agent,), daemon=True).start()
        return agent

    def _read(self, agent: _Agent) -> None:
        assert agent.proc.stdout is not None
        for line in agent.proc.stdout:
            try:
                self.events.put((agent.slot, json.loads(line)))
            except ValueError:
                continue  # a stray print of the handler; the protocol lines are JSON
        end = {"event": "eof", "t": SYSTEM_CLOCK.now(), "pid": agent.proc.pid}
        self.events.put((agent.slot, end))

    def _stderr(self, agent: _Agent) -> str:
        if agent.proc.poll() is None or agent.proc.stderr is None:
            return ""
        try:
            return agent.proc.stderr.read()[-1500:]
        except (OSError, ValueError):
            return ""

    # --- events ---------------------------------------------------------------------------------

    def _pump(self, seconds: float) -> None:
        """Apply events for ``seconds`` (at least what is already queued)."""
        deadline = SYSTEM_CLOCK.now() + seconds
        while True:
            left = deadline - SYSTEM_CLOCK.now()
            try:
                slot, event = self.events.get(timeout=max(0.0, left))
            except queue.Empty:
                return
            self._apply(slot, event)

    def _pump_until(self, done: Callable[[], bool], seconds: float) -> bool:
        deadline = SYSTEM_CLOCK.now() + seconds
        while not done():
            left = deadline - SYSTEM_CLOCK.now()
            if left <= 0:
                return False
            self._pump(min(left, 0.05))
        return True

    def _quiesce(self) -> None:
        """Apply what every agent printed until now: lines are flushed at once, so a moment's
        pumping catches up with every stream of a running agent."""
        self._pump(_QUIET_AFTER)

    def _apply(self, slot: int, event: dict[str, Any]) -> None:
        agent = self.agents.get(slot)
        if agent is None or (event["event"] == "eof" and event.get("pid") != agent.proc.pid):
            return  # a retired agent's last lines
        kind, at = event["event"], float(event["t"])
        self.log.append(f"{at:.3f} slot{slot} {kind} {_brief(event)}")
        if kind == "started":
            agent.started = True
            agent.node_id = event.get("node_id")
        elif kind in ("joining", "fenced", "leaving"):
            self._stop_training(agent, at)
            agent.status = {"joining": "joining", "fenced": "joining", "leaving": "leaving"}[kind]
        elif kind == "round":
            self._on_round(agent, event, at)
        elif kind == "left":
            agent.status = "left"
        elif kind == "closed":
            agent.status = "exited"
        elif kind == "error":
            self._stop_training(agent, at)
            up = sum(1 for other in self.agents.values() if other.up and other is not agent)
            agent.status = "gave_up"
            if up + 1 >= self.min_nodes:
                self._violate(
                    "H6",
                    f"slot{slot} gave up ({event.get('type')}: {event.get('message')}) "
                    f"while {up + 1} agents were up (min_nodes {self.min_nodes})",
                )
        elif kind == "eof" and agent.up:
            self._stop_training(agent, at)
            agent.status = "exited"
            self._violate("H6", f"slot{slot} exited unasked: {self._stderr(agent)}")

    def _on_round(self, agent: _Agent, event: dict[str, Any], at: float) -> None:
        size, rank, round_no = int(event["world"]), int(event["rank"]), event.get("round")
        participants = event.get("participants")
        members = tuple(participants) if participants else None
        if round_no is not None:
            key: tuple[Any, ...] = ("round", round_no)
        elif members is not None:
            key = ("members", members)
        else:
            key = ("size", size)
        world = self.worlds.get(key)
        if world is None:
            world = _World(key=key, size=size, participants=members, order=len(self.worlds))
            self.worlds[key] = world
        where = f"slot{agent.slot} in {_name(key)}"
        if size != world.size or members != world.participants:
            self._violate(
                "H1",
                f"{where}: world {size} {list(members or [])}, but another member saw "
                f"{world.size} {list(world.participants or [])}",
            )
        if members is not None and agent.node_id is not None and members[rank] != agent.node_id:
            self._violate("H1", f"{where}: rank {rank} is {members[rank]}, not this node")
        if not 0 <= rank < size:
            self._violate("H2", f"{where}: rank {rank} outside 0..{size - 1}")
        holders = [s for s, r in world.ranks.items() if r == rank and s != agent.slot]
        if holders:
            self._violate("H2", f"{where}: rank {rank} is also held by slot{holders[0]}")
        world.ranks[agent.slot] = rank
        if len(world.ranks) > size:
            self._violate("H2", f"{_name(key)}: {len(world.ranks)} members for world {size}")
        if not self.min_nodes <= size <= self.max_nodes:
            self._violate("H2", f"{where}: world {size} outside {self.min_nodes}..{self.max_nodes}")
        if self.sticky_ranks and agent.last_round is not None and round_no is not None:
            last_no, last_rank, last_seq = agent.last_round
            consecutive = last_no is not None and round_no == last_no + 1
            if consecutive and last_seq == agent.seq and last_rank < size and rank != last_rank:
                self._violate(
                    "H4",
                    f"{where}: rank {last_rank} in round {last_no} became {rank} "
                    f"although the world has {size} ranks",
                )
        agent.seq = int(event["seq"])
        agent.key, agent.rank, agent.round_no, agent.since = key, rank, round_no, at
        agent.last_round = (round_no, rank, agent.seq)
        agent.status = "training"
        agent.paused_long_at = None
        self.intervals.append(_Interval(slot=agent.slot, key=key, start=at, end=None))

    def _stop_training(self, agent: _Agent, at: float) -> None:
        if agent.key is None:
            return
        for index in range(len(self.intervals) - 1, -1, -1):
            interval = self.intervals[index]
            if interval.slot == agent.slot and interval.end is None:
                self.intervals[index] = _Interval(
                    slot=interval.slot, key=interval.key, start=interval.start, end=at
                )
                break
        agent.key = None

    def _violate(self, ident: str, message: str) -> None:
        self.violations.append(ConformanceViolation(ident, message))

    def _fail(self, ident: str, message: str) -> ConformanceViolation:
        self.failed = True
        tail = "\n".join(self.log[-40:])
        return ConformanceViolation(ident, f"{message}\nlast events:\n{tail}")

    def _raise_first(self, ident: str) -> None:
        for violation in self.violations:
            if violation.ident == ident:
                raise self._fail(ident, str(violation.args[0])[len(ident) + 2 :])

    # --- picking agents -------------------------------------------------------------------------

    def _with(self, *statuses: str) -> list[_Agent]:
        return [a for _, a in sorted(self.agents.items()) if a.status in statuses]

    def _candidates(self, *statuses: str) -> list[_Agent]:
        """The agents in ``statuses``, once some are (waiting up to ``step_timeout``)."""
        self._pump_until(lambda: bool(self._with(*statuses)), self.step_timeout)
        return self._with(*statuses)

    def _free_slots(self) -> list[int]:
        gone = ("left", "crashed", "gave_up", "exited")
        agents = self.agents
        free = [s for s in range(self.slots) if s not in agents or agents[s].status in gone]
        if not self.elastic:  # a fixed world takes back only the slot of a crashed node
            free = [s for s in free if s in self.agents and self.agents[s].status == "crashed"]
        return free

    def _mates_rejoin(self, gone: _Agent, key: tuple[Any, ...] | None) -> None:
        """The members of ``gone``'s world lose a peer: their workers fail, they re-join."""
        if key is None:
            return
        for other in self.agents.values():
            if other is not gone and other.status == "training" and other.key == key:
                self._tell_rejoin(other)

    def _tell_rejoin(self, agent: _Agent) -> None:
        if agent.seq not in agent.told_rejoin:
            agent.told_rejoin.add(agent.seq)
            agent.send(f"rejoin {agent.seq}")

    # --- rules ----------------------------------------------------------------------------------

    @initialize()
    def start_together(self) -> None:
        """The first agents start gated and join at once (a start takes longer than a last
        call, so a straggler would miss the first round)."""
        count = self.slots if not self.elastic else min(self.slots, max(self.initial, 1))
        started = [self._spawn(slot, gated=True) for slot in range(count)]
        ready = self._pump_until(lambda: all(a.started for a in started), _STARTUP_TIMEOUT)
        if not ready:
            raise self._fail("H5", "agents did not start: " + self._stderr(started[0]))
        for agent in started:
            agent.send("go")

    @precondition(lambda self: bool(self._free_slots()))
    @rule(pick=st.integers(0, 7))
    def start(self, pick: int) -> None:
        """A new node (or, for a fixed world, a crashed node's replacement) starts and joins."""
        free = self._free_slots()
        slot = free[pick % len(free)]
        old = self.agents.get(slot)
        if old is not None:
            self.retired.append(old)
        agent = self._spawn(slot, gated=False)
        self._pump_until(lambda: agent.started, _STARTUP_TIMEOUT)

    # Preconditions read only what the machine's own steps decide (who was started, left or
    # killed), never what the agents reported by now: hypothesis replays the same choices
    # when it shrinks a failure, though real processes take their own time.
    @precondition(lambda self: self.elastic and bool(self._with(*_UP)))
    @rule(pick=st.integers(0, 7))
    def leave(self, pick: int) -> None:
        """A training node leaves gracefully (``shutdown``)."""
        candidates = self._candidates("training")
        if not candidates:
            return
        agent = candidates[pick % len(candidates)]
        key = agent.key
        agent.send("leave")
        if not self._pump_until(lambda: agent.status in ("left", "exited"), self.step_timeout):
            raise self._fail(
                "H5", f"slot{agent.slot}: shutdown did not finish within {self.step_timeout} s"
            )
        self._mates_rejoin(agent, key)

    @precondition(lambda self: bool(self._with(*_UP)))
    @rule(pick=st.integers(0, 7))
    def crash(self, pick: int) -> None:
        """A node dies without a goodbye (SIGKILL): no shutdown, no more heartbeats."""
        candidates = self._candidates("joining", "training")
        if not candidates:
            return
        agent = candidates[pick % len(candidates)]
        self._pump(0.0)
        key = agent.key
        at = SYSTEM_CLOCK.now()
        agent.proc.send_signal(signal.SIGKILL)
        agent.proc.wait(self.step_timeout)
        self._stop_training(agent, at)
        agent.status = "crashed"
        self._mates_rejoin(agent, key)

    @precondition(lambda self: bool(self._with(*_UP)))
    @rule(pick=st.integers(0, 7), long=st.booleans())
    def pause(self, pick: int, long: bool) -> None:
        """A node stops (SIGSTOP) and resumes: briefly, or long enough to be declared dead."""
        candidates = self._candidates("joining", "training")
        if not candidates:
            return
        agent = candidates[pick % len(candidates)]
        self._pump(0.0)
        seconds = 2.0 * self.dead_after if long else 0.2 * self.dead_after
        at = SYSTEM_CLOCK.now()
        agent.proc.send_signal(signal.SIGSTOP)
        try:
            if long:
                # Its peers may declare it dead: its world is over from the moment it stopped.
                key = agent.key
                self._stop_training(agent, at)
                agent.key = key  # still its belief, for the rejoin it is told later
                agent.paused_long_at = at
                self._mates_rejoin(agent, key)
            self._pump(seconds)
        finally:
            agent.proc.send_signal(signal.SIGCONT)

    @rule()
    def settle(self) -> None:
        """No fault for a while: check H3, then H5, then H3 again."""
        self._check_one_world()
        self._check_liveness()
        self._check_one_world()

    # --- invariants -----------------------------------------------------------------------------

    @invariant()
    def inv_H1_agreement(self) -> None:
        self._raise_first("H1")

    @invariant()
    def inv_H2_ranks_are_0_to_n_minus_1(self) -> None:
        self._raise_first("H2")

    @invariant()
    def inv_H4_sticky_ranks(self) -> None:
        self._raise_first("H4")

    @invariant()
    def inv_H6_never_give_up_while_the_job_can_go_on(self) -> None:
        self._raise_first("H6")

    def _check_one_world(self) -> None:
        """H3: no two worlds train at one instant (judged once the event streams are quiet)."""
        self._quiesce()
        self._raise_first("H3")
        spans = self.intervals
        for i, first in enumerate(spans):
            for second in spans[i + 1 :]:
                if first.key == second.key:
                    continue
                if _overlap(first, second):
                    raise self._fail(
                        "H3",
                        f"slot{first.slot} trained in {_name(first.key)} while slot"
                        f"{second.slot} trained in {_name(second.key)}",
                    )

    def _settled(self) -> bool:
        up = self._with("starting", "joining", "training")
        training = [a for a in up if a.status == "training"]
        keys = {a.key for a in training if a.key is not None}
        if len(keys) != 1 or len(training) != sum(1 for a in training if a.key is not None):
            return False
        world = self.worlds[keys.pop()]
        return len(training) == world.size == min(len(up), self.max_nodes)

    def _check_liveness(self) -> None:
        """H5: with min_nodes up, they all (up to max_nodes) train in one round in time."""
        self._pump(0.0)
        if len(self._with("starting", "joining", "training")) < self.min_nodes:
            self._pump(self.poll)
            return

        def settled() -> bool:
            self._rejoin_the_superseded()
            return self._settled()

        if not self._pump_until(settled, self.liveness_bound):
            states = ", ".join(
                f"slot{a.slot}={a.status}" + (f"@{_name(a.key)}" if a.key else "")
                for a in self.agents.values()
            )
            raise self._fail(
                "H5",
                f"no round with every agent that is up within {self.liveness_bound} s ({states})",
            )
        self._raise_first("H6")

    def _rejoin_the_superseded(self) -> None:
        """A node still training in a world that a newer one replaced lost its peers: its
        workers fail and it re-joins (a handler that fences does this on its own)."""
        training = self._with("training")
        if not training:
            return
        newest = max(self.worlds[a.key].order for a in training if a.key is not None)
        for agent in training:
            if agent.key is not None and self.worlds[agent.key].order < newest:
                self._tell_rejoin(agent)

    def teardown(self) -> None:
        try:
            if not self.failed:
                for ident in ("H1", "H2", "H4", "H6"):
                    self._raise_first(ident)
                self._check_liveness()
                self._check_one_world()
        finally:
            for agent in (*self.agents.values(), *self.retired):
                _stop(agent, self.step_timeout)


def _stop(agent: _Agent, timeout: float) -> None:
    if agent.proc.poll() is None:
        agent.proc.send_signal(signal.SIGCONT)
        agent.proc.kill()
    try:
        agent.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pass
    for stream in (agent.proc.stdin, agent.proc.stdout, agent.proc.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass


def _overlap(first: _Interval, second: _Interval) -> bool:
    first_end = first.end if first.end is not None else float("inf")
    second_end = second.end if second.end is not None else float("inf")
    return first.start < second_end and second.start < first_end


def _name(key: tuple[Any, ...] | None) -> str:
    if key is None:
        return "no world"
    if key[0] == "round":
        return f"round {key[1]}"
    return f"world {key[1]}"


def _brief(event: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in event.items() if k not in ("event", "t"))


def handler_conformance_machine(
    factory: str,
    *,
    options: Options | Callable[[], Options] = {},  # noqa: B006 - read only
    slots: int = 3,
    min_nodes: int = 1,
    max_nodes: int = 3,
    initial: int = 2,
    elastic: bool = True,
    sticky_ranks: bool = False,
    dead_after: float = 1.0,
    liveness_bound: float = 20.0,
    step_timeout: float = 10.0,
    hard_timeout: float = 300.0,
    pythonpath: tuple[str, ...] = (),
    name: str = "HandlerConformance",
) -> type[HandlerConformance]:
    """A :class:`HandlerConformance` subclass for the handler ``factory`` builds.

    Args:
        factory: ``"module:function"``; the function takes an :class:`AgentSpec` and returns a
            new RendezvousHandler for that agent. It runs in each agent's own process.
        options: passed to the factory as ``AgentSpec.options`` (JSON values); a callable is
            called once per example, e.g. to give each example a fresh run id.
        slots: how many agents may exist at once (their slots are ``0..slots-1``).
        min_nodes, max_nodes: the rendezvous bounds (every agent gets the same).
        initial: agents started together at the beginning (a fixed world starts ``slots``).
        elastic: the handler forms new rounds as nodes come and go; False for a fixed world
            (then only a crashed node's replacement starts, and nobody leaves).
        sticky_ranks: the handler promises H4 (needs ``round`` on its RendezvousInfo).
        dead_after: seconds of silence after which the handler may declare a node dead (its
            keep-alive expiry); a long pause is twice that, a short one a fifth of it.
        liveness_bound: seconds H5 allows for all agents that are up to train in one round.
        step_timeout: the bound of every other wait of a step.
        hard_timeout: each agent process ends itself after this many seconds.
        pythonpath: more import paths for the agent processes (where ``factory`` lives).
        name: the class name (shown in failure reports).
    """
    attributes = {
        "factory": factory,
        "options": options,
        "slots": slots,
        "min_nodes": min_nodes,
        "max_nodes": max_nodes,
        "initial": initial,
        "elastic": elastic,
        "sticky_ranks": sticky_ranks,
        "dead_after": dead_after,
        "liveness_bound": liveness_bound,
        "step_timeout": step_timeout,
        "hard_timeout": hard_timeout,
        "pythonpath": tuple(pythonpath),
    }
    return type(name, (HandlerConformance,), attributes)


__all__ = ["ConformanceViolation", "HandlerConformance", "handler_conformance_machine"]
