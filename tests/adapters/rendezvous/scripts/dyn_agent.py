"""A minimal agent for the multi-process rendezvous tests: it joins, watches, rejoins, leaves.

Usage: ``python dyn_agent.py '<json>'`` with keys ``backend``, ``endpoint``, ``run_id``, ``min``,
``max``, ``conf`` (the --rdzv-conf dict), ``name``, ``hard_timeout`` (seconds; SIGALRM kills
the process then, so it can never hang a test) and ``gate`` (wait for a line on stdin before
joining).

Prints one JSON line per event, flushed: ``round`` (a completed round: rank, world, round,
participants, restart count, bootstrap endpoint, wall time), ``waiting`` (num_nodes_waiting
changed), ``opened`` (the next round was opened: it rejoins), ``closed`` (then exits 0),
``left`` (after SIGTERM: graceful shutdown, exits 0), ``error`` (a RendezvousError, exits 3).
SIGUSR1 asks it to admit waiting nodes: it opens the next round (``scale_up``) and rejoins.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from typing import Any

from tpelastic.rendezvous import (
    DynamicRendezvousHandler,
    DynamicRendezvousInfo,
    RendezvousConnectionError,
    RendezvousError,
    RendezvousParameters,
    RoundWatch,
    create_handler,
)

# Each look costs 4 store calls, and over TCP every call takes an ephemeral port for 60 s
# (docs/stores.md): look once per heartbeat interval, not faster.
WATCH_EVERY = 0.25
# A store call can fail once under port pressure ("request failed"); an agent rides that out.
WATCH_ERRORS_IN_A_ROW = 4
flags = {"leave": False, "admit": False}


def say(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "t": time.time(), **fields}), flush=True)


def report(handler: DynamicRendezvousHandler, info: DynamicRendezvousInfo) -> None:
    master = info.bootstrap_store_info
    say(
        "round",
        node=handler.node_id,
        rank=info.rank,
        world=info.world_size,
        round=info.round,
        participants=list(info.participants),
        restart_count=info.restart_count,
        master=[master.master_addr, master.master_port] if master else None,
    )


def look(handler: DynamicRendezvousHandler) -> RoundWatch:
    for attempt in range(1, WATCH_ERRORS_IN_A_ROW + 1):
        try:
            return handler.watch()
        except RendezvousConnectionError as error:
            if attempt == WATCH_ERRORS_IN_A_ROW:
                raise
            say("store_error", message=str(error))
            time.sleep(WATCH_EVERY)
    raise AssertionError("unreachable")


def watch_loop(handler: DynamicRendezvousHandler) -> None:
    waiting = 0
    while True:
        if flags["leave"]:
            say("left", ok=handler.shutdown())
            return
        seen = look(handler)
        if seen.closed is not None:
            say("closed", outcome=seen.closed.outcome, reason=seen.closed.reason)
            handler.shutdown()
            return
        reason = None
        if seen.next_opened is not None:
            say("opened", reason=seen.next_opened)
            if flags["leave"]:  # told to go while the world was ending: go, don't rejoin
                continue
        elif flags["admit"]:
            flags["admit"] = False
            handler.open_next_round("scale_up")
            reason = "scale_up"
        else:
            if seen.waiting != waiting:
                waiting = seen.waiting
                say("waiting", n=handler.num_nodes_waiting())
            time.sleep(WATCH_EVERY)
            continue
        report(handler, handler.next_rendezvous(reason=reason))
        waiting = 0


def main() -> int:
    spec = json.loads(sys.argv[1])
    signal.alarm(int(spec.get("hard_timeout", 30)))
    signal.signal(signal.SIGTERM, lambda *_: flags.__setitem__("leave", True))
    signal.signal(signal.SIGUSR1, lambda *_: flags.__setitem__("admit", True))
    params = RendezvousParameters(
        spec["backend"],
        spec["endpoint"],
        spec["run_id"],
        spec["min"],
        spec["max"],
        local_addr="127.0.0.1",
        **spec.get("conf", {}),
    )
    handler = create_handler(params)
    assert isinstance(handler, DynamicRendezvousHandler)
    say(
        "started", node=handler.node_id, name=spec.get("name"), hosts=handler.store_host is not None
    )
    try:
        if spec.get("gate"):
            sys.stdin.readline()  # wait for "go", so that agents join together
        report(handler, handler.next_rendezvous())
        watch_loop(handler)
    except RendezvousError as error:
        say("error", type=type(error).__name__, message=str(error))
        handler.shutdown()
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
