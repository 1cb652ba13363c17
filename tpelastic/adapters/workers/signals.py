"""What the launcher does with the signals it receives, as a configurable policy.

Each handled signal gets one action:

- ``STOP``: raise ``SignalException`` in the main thread, so the agent unwinds and closes its
  workers with that same signal as the death signal (then SIGKILL after the grace period).
  ``SignalException`` is a ``BaseException``: no broad ``except Exception`` on the way (a
  best-effort console line, a store read) can swallow a stop. Given a :class:`StopRequests`,
  the handler also records the stop, for a loop that checks it every pass, and raises only
  until that loop has taken it.
- ``FORWARD``: pass the signal on to every running worker and carry on. Schedulers send SIGUSR1
  or SIGUSR2 some time before preemption; forwarding lets workers checkpoint.
- ``IGNORE``: do nothing.

Defaults: INT, TERM, HUP and QUIT stop; USR1 and USR2 are forwarded.
"""

from __future__ import annotations

import enum
import os
import signal
import threading
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any

from attrs import field, frozen

from tpelastic.core.values import value_eq, value_hash, value_repr


class SignalAction(enum.Enum):
    """What to do when the launcher receives a signal."""

    STOP = "stop"
    FORWARD = "forward"
    IGNORE = "ignore"


class SignalException(BaseException):
    """The launcher received a signal whose action is STOP.

    A ``BaseException`` (torch's is an ``Exception``), like ``KeyboardInterrupt``: code that
    catches ``Exception`` to carry on does not stop the launcher from stopping.

    Attributes:
        sigval: the signal received; use it as the workers' death signal.
    """

    def __init__(self, msg: str, sigval: signal.Signals) -> None:
        super().__init__(msg)
        self.sigval = sigval


def _default_actions() -> dict[signal.Signals, SignalAction]:
    stop = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
    forward = (signal.SIGUSR1, signal.SIGUSR2)
    return {
        **{sig: SignalAction.STOP for sig in stop},
        **{sig: SignalAction.FORWARD for sig in forward},
    }


@frozen(kw_only=True)
class SignalPolicy:
    """Per signal, the action to take. Signals not listed keep their current handler.

    Attributes:
        actions: the action per signal.
        forward_to_group: forward to each worker's whole process group rather than to the
            worker process alone (see ``PContext.send_signal``).
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    actions: Mapping[signal.Signals, SignalAction] = field(factory=_default_actions)
    forward_to_group: bool = False

    @classmethod
    def handling(cls, names: str) -> SignalPolicy:
        """The policy for torchrun's ``--signals-to-handle``: the named signals (comma-separated,
        ``SIGTERM,SIGINT``) stop the agent and its workers; SIGUSR1 and SIGUSR2 are forwarded
        unless named; every other signal keeps its handler.

        Raises:
            ValueError: a name that is not a signal, or SIGKILL/SIGSTOP.
        """
        stop: dict[signal.Signals, SignalAction] = {}
        for name in (n.strip() for n in names.split(",")):
            sig = getattr(signal, name, None) if name.startswith("SIG") else None
            if not isinstance(sig, signal.Signals) or sig in (signal.SIGKILL, signal.SIGSTOP):
                raise ValueError(f"signals_to_handle: {name!r} is not a signal that can be handled")
            stop[sig] = SignalAction.STOP
        forward: dict[signal.Signals, SignalAction] = {
            s: SignalAction.FORWARD for s in (signal.SIGUSR1, signal.SIGUSR2)
        }
        return cls(actions={**forward, **stop})

    def evolve_action(self, sig: signal.Signals, action: SignalAction) -> SignalPolicy:
        """A copy of this policy with ``sig`` mapped to ``action``."""
        return SignalPolicy(
            actions={**self.actions, sig: action}, forward_to_group=self.forward_to_group
        )


class StopRequests:
    """The STOP signals a process received, for a loop that takes them every pass.

    The raise of :class:`SignalException` ends a blocking call at once, but code that catches
    ``BaseException`` (a third party's) may still swallow it; the record stays, and the loop's
    next pass takes it. Once the loop has taken a stop (or stopped taking them: its outcome is
    in), later STOP signals are recorded without raising: what is left is a bounded teardown,
    and it must run to its end.
    """

    def __init__(self) -> None:
        self.first: signal.Signals | None = None
        """The first STOP signal received (None: none yet)."""
        self._taken = False

    def received(self, sig: signal.Signals) -> bool:
        """Record ``sig`` (the handler calls this); True when the handler is to raise."""
        if self.first is None:
            self.first = sig
        return not self._taken

    def take(self) -> signal.Signals | None:
        """The stop to carry out now, once (None: none, or already taken); from here on no
        STOP signal raises."""
        if self._taken or self.first is None:
            return None
        self._taken = True
        return self.first

    def stop_raising(self) -> None:
        """No STOP signal raises from here on (each is still recorded)."""
        self._taken = True

    @property
    def stopping(self) -> bool:
        """Whether a STOP signal was received."""
        return self.first is not None

    @property
    def pending(self) -> bool:
        """Whether a STOP signal was received and not yet taken."""
        return self.first is not None and not self._taken


def install_signal_policy(
    policy: SignalPolicy,
    target: Callable[[], Any | None],
    *,
    stops: StopRequests | None = None,
) -> Callable[[], None]:
    """Install handlers for ``policy``; returns a function that restores the old handlers.

    Args:
        policy: the actions per signal.
        target: returns the current worker group (a ``PContext``) or None when
            there is none; called at signal time, so a restart's new group is used.
        stops: where STOP signals are recorded; the handler then raises only while
            ``stops.received`` says so. Without it every STOP signal raises.

    Raises:
        ValueError: when called outside the main thread (Python only delivers signals there).
    """
    if threading.current_thread() is not threading.main_thread():
        raise ValueError("install_signal_policy must be called from the main thread")

    def handle(signum: int, _frame: FrameType | None) -> None:
        sig = signal.Signals(signum)
        action = policy.actions.get(sig, SignalAction.IGNORE)
        if action is SignalAction.FORWARD:
            group = target()
            if group is not None:
                group.send_signal(sig, to_group=policy.forward_to_group)
        elif action is SignalAction.STOP:
            if stops is None or stops.received(sig):
                raise SignalException(f"Process {os.getpid()} got signal: {sig.name}", sig)

    previous = {}
    for sig, action in policy.actions.items():
        previous[sig] = signal.signal(
            sig, signal.SIG_IGN if action is SignalAction.IGNORE else handle
        )

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)

    return restore


__all__ = [
    "SignalAction",
    "SignalException",
    "SignalPolicy",
    "StopRequests",
    "install_signal_policy",
]
