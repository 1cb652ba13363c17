"""One agent process of the handler conformance machine (``tpelastic.testing.handler_contract``).

Run as ``python -m tpelastic.testing.handler_agent '<json>'``; the machine starts it, never a
user. The JSON names the handler factory (``module:function``), this agent's slot, the node
bounds, the factory's options and a hard timeout. The process builds one handler and behaves like
a torchrun-style agent around it:

* it joins (``next_rendezvous``), then "trains": every ``poll`` seconds it reads the machine's
  commands on stdin and looks at the rendezvous;
* it re-joins when the look says so (a round-aware handler's ``watch()`` reports the next round
  opened, or waiting nodes with room to admit them; any other handler: ``num_nodes_waiting() >
  0``), or when the machine says ``rejoin <seq>`` (its workers failed because a peer of round
  result ``seq`` was lost);
* it fences itself as the product does: its keep-alive is read the way the agent reads it
  (``Membership.last_beat``, with the handler's ``member_config``) and stepped through the
  membership core (``tpelastic.core.membership``). On ``KeepAliveLapsed`` it stops "training"
  and waits, still reading its commands, its keep-alive and the close, until a heartbeat lands
  again (``KeepAliveRestored``: it re-joins); a keep-alive still lapsed past the join timeout is
  a failed rendezvous, as in the product;
* ``leave`` makes it call ``shutdown()`` and exit 0; a rendezvous error ends it with exit 3.

It prints one JSON line per event, flushed, each with ``t`` (``SYSTEM_CLOCK.now()``, one clock for
every process of the machine): ``started``, ``joining``, ``round``, ``fenced``, ``restored``,
``look_failed``, ``leaving``, ``left``, ``closed``, ``error``. SIGALRM ends it after the hard
timeout and it dies with its parent, so it never outlives a test run.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import queue
import signal
import sys
import threading
from typing import Any

from tpelastic.adapters.agent.membership import Membership
from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.rendezvous.errors import RendezvousError, RendezvousTimeoutError
from tpelastic.adapters.rendezvous.handler import RendezvousHandler
from tpelastic.adapters.rendezvous.info import RendezvousInfo
from tpelastic.core import agent as ag
from tpelastic.core import membership as mb
from tpelastic.testing.handler_spec import AgentSpec

EXIT_GAVE_UP = 3


def say(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "t": SYSTEM_CLOCK.now(), **fields}), flush=True)


def load_factory(path: str) -> Any:
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"a handler factory is 'module:function', got {path!r}")
    return getattr(importlib.import_module(module_name), attribute)


def _die_with_parent() -> None:
    try:  # Linux: SIGKILL when the machine's process goes away without stopping us
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Agent:
    """The join / train / re-join loop around one handler."""

    def __init__(self, handler: RendezvousHandler, spec: AgentSpec, poll: float) -> None:
        self.handler = handler
        self.spec = spec
        self.poll = poll
        self.round_aware = callable(getattr(handler, "watch", None))
        self.commands: queue.Queue[str] = queue.Queue()
        self.seq = -1  # how many round results this agent reported, minus one
        self.world = 0
        # The keep-alive as the agent reads it, judged by the membership core.
        self.membership = Membership(handler)
        self.member_config = self.membership.member_config()
        self.member = mb.MemberState()

    def read_commands(self) -> None:
        for line in sys.stdin:
            self.commands.put(line.strip())
        self.commands.put("leave")  # the machine went away: leave rather than linger

    def join(self, why: str | None) -> None:
        say("joining", why=why)
        if why is not None and self.round_aware:
            info = self.handler.next_rendezvous(reason=why)  # type: ignore[call-arg]
        else:
            info = self.handler.next_rendezvous()
        self.seq += 1
        self.world = info.world_size
        self.report(info)

    def report(self, info: RendezvousInfo) -> None:
        participants = getattr(info, "participants", ()) or ()
        round_no = getattr(info, "round", None)
        say(
            "round",
            seq=self.seq,
            rank=info.rank,
            world=info.world_size,
            round=round_no if isinstance(round_no, int) else None,
            participants=[str(p) for p in participants] or None,
            node_id=_text_or_none(getattr(self.handler, "node_id", None)),
        )

    def train(self) -> str | None:
        """Until something ends this world: the reason to re-join, or "leave"."""
        while True:
            try:
                command = self.commands.get(timeout=self.poll)
            except queue.Empty:
                command = ""
            if command == "leave":
                return "leave"
            if command == f"rejoin {self.seq}":
                return "membership"
            if self.keep_alive() is ag.KeepAliveLapsed:
                say("fenced")
                return self.fenced()
            try:
                why = self.look()
            except RendezvousError as error:
                say("look_failed", type=type(error).__name__, message=str(error))
                continue
            if why is not None:
                return why

    def keep_alive(self) -> type | None:
        """Read this node's keep-alive and step the membership core with it: the type of the
        agent event it means (``KeepAliveLapsed``, ``KeepAliveRestored``, ``RendezvousFailed``)
        or None. A fenced node's read with no keep-alive to wait for cannot stay lapsed."""
        now = SYSTEM_CLOCK.now()
        last_beat = self.membership.last_beat()
        if last_beat is None:
            if self.member.phase is not mb.MemberPhase.FENCED:
                return None
            last_beat = now
        silent_until = self.membership.store_silent_until()
        read = mb.KeepAliveRead(now=now, last_beat=last_beat, silent_until=silent_until)
        done = mb.step(self.member, read, self.member_config)
        self.member = done.state
        for effect in done.effects:
            if isinstance(effect, ag.RendezvousFailed):
                raise RendezvousTimeoutError(effect.reason)
            if isinstance(effect, (ag.KeepAliveLapsed, ag.KeepAliveRestored)):
                return type(effect)
        return None

    def fenced(self) -> str:
        """Fenced: wait, reading commands, the keep-alive and the close, until a heartbeat
        lands again (re-join: "membership"), the machine says "leave", or the run closed."""
        while True:
            try:
                command = self.commands.get(timeout=self.poll)
            except queue.Empty:
                command = ""
            if command == "leave":
                return "leave"
            if self.keep_alive() is ag.KeepAliveRestored:
                say("restored")
                return "membership"
            try:
                if self.look() == "closed":
                    return "closed"
            except RendezvousError as error:
                say("look_failed", type=type(error).__name__, message=str(error))

    def look(self) -> str | None:
        if self.round_aware:
            seen = self.handler.watch()  # type: ignore[attr-defined]
            if seen.closed is not None:
                return "closed"
            if seen.next_opened is not None:
                return "rejoin"
            if seen.waiting > 0 and self.world < self.spec.max_nodes:
                return "scale_up"
            return None
        return "rejoin" if self.handler.num_nodes_waiting() > 0 else None

    def run(self, gated: bool) -> int:
        threading.Thread(target=self.read_commands, daemon=True).start()
        if gated:
            while self.commands.get() != "go":
                pass
        why: str | None = None
        try:
            while True:
                self.join(why)
                why = self.train()
                if why == "leave":
                    say("leaving")
                    say("left", ok=bool(self.handler.shutdown()))
                    return 0
                if why == "closed":
                    say("closed")
                    self.handler.shutdown()
                    return 0
                if why == "rejoin":
                    why = None  # a plain re-join: the next round is already open
        except RendezvousError as error:
            say("error", type=type(error).__name__, message=str(error))
            self.handler.shutdown()
            return EXIT_GAVE_UP


def _text_or_none(value: object) -> str | None:
    return None if value is None else str(value)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tpelastic.testing.handler_agent '<json>'", file=sys.stderr)
        return 2
    config = json.loads(argv[1])
    _die_with_parent()
    signal.alarm(max(1, int(config["hard_timeout"])))
    spec = AgentSpec(
        slot=int(config["slot"]),
        min_nodes=int(config["min_nodes"]),
        max_nodes=int(config["max_nodes"]),
        options=dict(config.get("options", {})),
    )
    handler = load_factory(str(config["factory"]))(spec)
    say("started", node_id=_text_or_none(getattr(handler, "node_id", None)))
    agent = Agent(handler, spec, float(config.get("poll", 0.05)))
    return agent.run(bool(config.get("gated", False)))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
