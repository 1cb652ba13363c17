"""One real LocalElasticAgent in this process's main thread, sent SIGTERM from inside one of
its own store calls; prints how the run ended as one JSON line.

Usage: stop_signal_agent.py PORT RUN_ID SCENARIO, with SCENARIO one of

- ``re-form``: a peer (a second handler on a thread) joins round 0 and leaves; the signal comes
  while the agent names who left, as the round re-forms (that console line reads the store);
- ``barrier``: the worker succeeds; the signal comes as the agent arrives at the exit barrier;
- ``swallowed``: as ``barrier``, inside a store client that catches ``BaseException``;
- ``other-thread``: the worker runs on; with a monitor interval of a minute the loop waits in
  its inbox when the signal comes, and the kernel hands the signal to another thread (the main
  thread blocks it here, so the kernel must): Python runs the handler on the main thread only
  when that thread runs Python code again.

A process of its own: the agent makes its process a child subreaper and installs signal
handlers, neither of which may leak into the test runner.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from tpelastic.adapters.agent.local import LocalElasticAgent
from tpelastic.adapters.agent.spec import WorkerSpec
from tpelastic.adapters.stores.tcp_client import connect
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.rendezvous import DynamicRendezvousHandler, P10dRendezvousBackend

CONFIG = RendezvousConfig(
    min_nodes=1,
    max_nodes=2,
    join_timeout=20.0,
    last_call_timeout=1.0,  # the first round waits this long for the second node
    heartbeat_interval=0.5,
    heartbeat_timeout=10.0,
)


class SignalOnCall:
    """Our TCP client; the first ``method`` call on the main thread for a key containing
    ``marker`` sends this process SIGTERM (the handler then runs in the caller's code).
    ``swallow``: the client eats what the handler raises, as a careless client would."""

    def __init__(self, store: Any, method: str, marker: str, *, swallow: bool = False) -> None:
        self._store, self._method, self._marker, self._swallow = store, method, marker, swallow
        self.sent_at: float | None = None

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._store, name)
        if name != self._method:
            return real

        def call(key: str, *args: Any) -> Any:
            value = real(key, *args)
            main = threading.current_thread() is threading.main_thread()
            if self.sent_at is None and main and self._marker in key:
                self.sent_at = time.monotonic()
                if not self._swallow:
                    os.kill(os.getpid(), signal.SIGTERM)
                    return value
                try:
                    os.kill(os.getpid(), signal.SIGTERM)
                    time.sleep(0.01)  # the handler runs here, inside this try
                except BaseException:  # what this client is for: a stop swallowed
                    pass
            return value

        return call


def handler(port: int, run_id: str, node: str, store: Any) -> DynamicRendezvousHandler:
    return DynamicRendezvousHandler(
        run_id,
        P10dRendezvousBackend(store),
        CONFIG,
        backend_name="tcp",
        node_id=node,
        local_addr="127.0.0.1",
    )


class SignalFromAnotherThread:
    """Sends SIGTERM once the agent's worker runs, from a thread that does not block it, after
    the main thread has blocked it (so the kernel hands it to a thread other than main)."""

    def __init__(self) -> None:
        self.sent_at: float | None = None
        self.running: Callable[[], bool] = lambda: False
        # Started before the main thread blocks SIGTERM: this thread keeps it unblocked.
        threading.Thread(target=self._send, daemon=True).start()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    def _send(self) -> None:
        deadline = time.monotonic() + 30
        while not self.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # the loop is in its inbox wait by now
        self.sent_at = time.monotonic()
        os.kill(os.getpid(), signal.SIGTERM)


def main() -> None:
    port, run_id, scenario = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    client = connect("127.0.0.1", port, timeout=5.0)
    store: Any = client
    sender: SignalFromAnotherThread | None = None
    if scenario == "re-form":
        store = SignalOnCall(client, "get", "/gone/")
    elif scenario == "other-thread":
        sender = SignalFromAnotherThread()
    else:
        store = SignalOnCall(client, "add", "agent/exit/", swallow=scenario == "swallowed")
    seconds = 20 if scenario in ("re-form", "other-thread") else 0
    spec = WorkerSpec(
        role="trainer",
        local_world_size=1,
        rdzv_handler=handler(port, run_id, "a", store),
        entrypoint=sys.executable,
        args=("-c", f"import time; time.sleep({seconds})"),
        min_nodes=1,
        max_nodes=2,
        monitor_interval=60.0 if sender is not None else 0.1,
        exit_barrier_timeout=5.0,
        close_timeout=1.0,  # the workers inherit the blocked SIGTERM: SIGKILL follows soon
    )
    agent = LocalElasticAgent(spec)
    peer = handler(port, run_id, "b", connect("127.0.0.1", port, timeout=5.0))

    def peer_joins_then_leaves() -> None:
        peer.next_rendezvous()
        deadline = time.monotonic() + 20
        while agent.get_worker_group().group_world_size != 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        peer.shutdown()  # the agent's round watcher sees the leave: the round re-forms

    if scenario == "re-form":
        threading.Thread(target=peer_joins_then_leaves, daemon=True).start()
    if sender is not None:
        sender.running = lambda: bool(agent._worker_pids())
    result = agent.run()
    peer.shutdown()
    sent = sender.sent_at if sender is not None else store.sent_at
    print(
        json.dumps(
            {
                "exit_code": result.exit_code,
                "round": result.round,
                "after_signal": None if sent is None else time.monotonic() - sent,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
