"""The agent's side of in-process restart: the workers' control channels, and their messages
as the core's observations.

The channels (``adapters/workers/control.py``) are made at the first start of workers, when the
agent can start a single worker again (its subclass says so) and ``TPELASTIC_IN_PROCESS`` is not
``0``. Every start of workers has an id (``start``): a full start takes a new one, and so does a
pause (the start it leads to). Each worker's environment carries its channel and the id; a
message that names another start than the current one is from a world that ended, and is
dropped. What the messages mean is decided by the core (``core/in_process.py``, through
``core/node.py``); here they are only decoded and the orders sent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tpelastic.adapters.agent.pumps import ControlMessage
from tpelastic.adapters.ports import Clock
from tpelastic.core import in_process as ip
from tpelastic.core import node as composed

if TYPE_CHECKING:
    from tpelastic.adapters.agent.pumps import Inbox
    from tpelastic.adapters.workers.control import ControlChannels

log = logging.getLogger("tpelastic.agent")


class Control:
    """The channels of this agent's workers, the current start's id and the orders.

    Args:
        make_channels: makes the channels for ``local_world_size`` workers, calling back with
            every message; None when this agent cannot restart a single worker.
    """

    def __init__(
        self,
        local_world_size: int,
        inbox: Inbox,
        clock: Clock,
        make_channels: Callable[[int, Callable[[int, dict[str, Any]], None]], ControlChannels]
        | None,
    ) -> None:
        self._size, self._inbox, self._clock = local_world_size, inbox, clock
        self._make = make_channels
        self._channels: ControlChannels | None = None
        self.start = 0
        """The current start's id (0: none yet)."""

    def _ready(self) -> ControlChannels | None:
        if self._channels is None and self._make is not None:
            from tpelastic.adapters.workers.control import enabled

            if enabled():
                inbox = self._inbox
                self._channels = self._make(
                    self._size, lambda rank, msg: inbox.put(ControlMessage(rank, msg))
                )
            else:
                self._make = None
        return self._channels

    def new_start(self, envs: dict[int, dict[str, str]]) -> dict[int, dict[str, str]]:
        """A full start: a new id, and ``envs`` with each worker's channel."""
        self.start += 1
        return self.with_channel(envs)

    def with_channel(self, envs: dict[int, dict[str, str]]) -> dict[int, dict[str, str]]:
        channels = self._ready()
        if channels is None:
            return envs
        return {lr: {**env, **channels.env(lr, self.start)} for lr, env in envs.items()}

    def pause(self, keep: frozenset[int]) -> None:
        """Tell the ``keep`` workers to stop: the start they stop for gets a new id."""
        self.start += 1
        channels = self._channels
        for lr in sorted(keep):
            if channels is None or not channels.send(lr, {"op": "stop", "start": self.start}):
                log.warning("local rank %d: no control channel to stop it in process", lr)

    def resume(self, local_rank: int, env: dict[str, str]) -> None:
        """Tell a kept worker its new world."""
        channels = self._channels
        order = {"op": "start", "start": self.start, "env": env}
        if channels is None or not channels.send(local_rank, order):
            log.warning("local rank %d: no control channel to restart it in process", local_rank)

    def decode(self, item: ControlMessage) -> object | None:
        """The core's observation of a worker's message; None when it is stale or unknown."""
        msg, lr = item.message, item.local_rank
        now = self._clock.now()
        op = msg["op"]
        if op == "closed":  # the rank's current connection, whichever start it served
            return ip.WorkerDetached(now=now, local_rank=lr)
        if msg.get("start") != self.start:
            return None
        reason = str(msg.get("reason", ""))[:500]
        if op == "hello":
            return ip.WorkerAttached(now=now, local_rank=lr)
        if op == "raised":
            return composed.WorkerRaised(now=now, local_rank=lr, reason=reason)
        if op == "stopped":
            return ip.WorkerPaused(now=now, local_rank=lr)
        if op == "started":
            return ip.WorkerResumed(now=now, local_rank=lr)
        if op == "reinit_failed":
            return ip.WorkerReinitFailed(now=now, local_rank=lr, reason=reason)
        log.warning("control channel of local rank %d: unknown message %r", lr, op)
        return None

    def close(self) -> None:
        channels, self._channels = self._channels, None
        if channels is not None:
            channels.close()


__all__ = ["Control"]
