"""In-process restart for training code: the process lives on across a restart of its world.

Use it in the worker script the agent starts::

    import tpelastic.worker as elastic

    def train(state):
        import tensorplay.distributed as dist      # the process group is formed already
        while state.step < 100:
            ...                                    # one step
            state.step += 1
            state.commit()                         # the point a restart resumes from

    elastic.run(train, elastic.State(step=0, weights=...))

:func:`run` forms the process group from the environment the agent gave (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, ...), calls ``train(state)`` and destroys the
group when it returns. Under ``tpelastic run`` it also attaches to the agent over a local
control channel (a unix socket the agent made for this worker: ``TPELASTIC_CONTROL``). When the
world restarts (a peer's worker raised or died, this worker raised) the agent tells the
surviving workers to stop: ``run`` interrupts ``train``, destroys the process group, restores
the last committed state, takes the new world's environment (rank, world size, master address
and port, restart count: a fresh store namespace), forms the group again and calls ``train``
again. Only a worker whose process died is started again. Anything unexpected (this worker
does not answer in time, re-initialising raises) falls back to a full restart of every
worker, as without this API. See docs/in-process-restart.md.
"""

from __future__ import annotations

import copy
import ctypes
import datetime
import json
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from tpelastic.adapters.workers.control import CONTROL_ENV, START_ENV, encode

__all__ = ["RestartRequested", "State", "run"]

# How long a worker that raised waits for the agent's word before it exits as without the API.
_ORDER_TIMEOUT = float(os.environ.get("TPELASTIC_IN_PROCESS_ORDER_TIMEOUT", "120"))


class RestartRequested(BaseException):
    """Raised inside the training function when the agent stops this world (a BaseException,
    so a training loop's ``except Exception`` does not swallow it)."""


class State:
    """The training state a restart resumes from, kept in this process's memory.

    ``State(step=0, model=...)``: the values are attributes. :meth:`commit` keeps a deep copy
    of them; :meth:`restore` (called by :func:`run` before the training function is called
    again) puts that copy back. Subclass and override both for state that cannot be deep
    copied. ``restarts`` counts the in-process restarts this process went through.
    """

    def __init__(self, **values: Any) -> None:
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "_committed", copy.deepcopy(values))
        object.__setattr__(self, "restarts", 0)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "restarts":
            object.__setattr__(self, name, value)
        else:
            self._values[name] = value

    def commit(self) -> None:
        """Keep the current values as the point a restart resumes from."""
        object.__setattr__(self, "_committed", copy.deepcopy(self._values))

    def restore(self) -> None:
        """Go back to the last committed values."""
        object.__setattr__(self, "_values", copy.deepcopy(self._committed))

    def sync(self) -> None:
        """Take rank 0's committed values (a collective: every rank calls it). :func:`run`
        calls it after forming the group of a restarted world, so a respawned worker starts
        from the same point as the kept ones."""
        import tensorplay.distributed as dist

        box = [self._committed]
        dist.broadcast_object_list(box, src=0)
        object.__setattr__(self, "_committed", box[0])
        self.restore()


class _Channel:
    """This worker's end of its control channel; a reader thread takes the agent's orders."""

    def __init__(self, path: str, start: int) -> None:
        self.start = start
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(path)
        self._cond = threading.Condition()
        self._orders: list[dict[str, Any]] = []
        self._closed = False
        self._training = False  # the training function runs: a stop interrupts it
        self._main = threading.main_thread().ident
        self.send("hello", pid=os.getpid())
        threading.Thread(target=self._read, name="tpelastic-control", daemon=True).start()

    def send(self, op: str, **fields: Any) -> None:
        try:
            self._sock.sendall(encode({"op": op, "start": self.start} | fields))
        except OSError:
            pass  # the agent is gone: the process is stopped with it

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                data = self._sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                with self._cond:
                    self._closed = True
                    self._cond.notify_all()
                return
            *lines, buffer = (buffer + data).split(b"\n")
            for line in lines:
                try:
                    order = json.loads(line)
                except ValueError:
                    continue
                with self._cond:
                    self._orders.append(order)
                    if order.get("op") == "stop" and self._training:
                        self._interrupt()
                    self._cond.notify_all()

    def _interrupt(self) -> None:
        # Raised in the main thread at its next bytecode: a C call (a collective) ends first,
        # which a peer's destroyed process group makes short.
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(self._main or 0), ctypes.py_object(RestartRequested)
        )

    def training(self, on: bool) -> None:
        with self._cond:
            self._training = on
            if not on:  # a stop that came as training ended is taken from the orders instead
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._main or 0), None)
            elif any(o.get("op") == "stop" for o in self._orders):
                raise RestartRequested  # stopped before training began again

    def stop_pending(self) -> bool:
        """A stop came while the training function was ending: the world restarts all the same
        (its peers were told too), so this worker takes part."""
        with self._cond:
            return any(o.get("op") == "stop" for o in self._orders)

    def next_order(self, op: str, timeout: float) -> dict[str, Any] | None:
        """The next order ``op`` (earlier orders of other kinds are dropped), or None when the
        agent closed the channel or ``timeout`` passed."""
        with self._cond:
            end = [timeout]

            def found() -> dict[str, Any] | None:
                while self._orders:
                    order = self._orders.pop(0)
                    if order.get("op") == op:
                        return order
                return None

            while True:
                order = found()
                if order is not None or self._closed:
                    return order
                if not self._cond.wait(end[0]):
                    return found()


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:500]


def _destroy() -> None:
    import tensorplay.distributed as dist

    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # a group a dead peer broke: what is left of it goes with the process
            pass


def run(
    train: Callable[[State], Any],
    state: State,
    *,
    backend: str = "gloo",
    timeout: datetime.timedelta = datetime.timedelta(seconds=60),
) -> Any:
    """Form the process group, call ``train(state)``, destroy the group; return what it returns.

    Under a tpelastic agent the world may restart in process any number of times meanwhile
    (see the module's docstring); ``timeout`` bounds each forming of the group.
    """
    path = os.environ.get(CONTROL_ENV)
    channel = None
    if path:
        try:
            channel = _Channel(path, int(os.environ.get(START_ENV, "0")))
        except (OSError, ValueError):
            channel = None  # no agent to talk to: as without the API
    first = True
    while True:
        if first or channel is None:
            _form(state, backend, timeout)
        else:
            try:
                _form(state, backend, timeout)
            except Exception as error:
                channel.send("reinit_failed", reason=_one_line(error))
                raise
            channel.send("started")
        first = False
        if channel is None:
            try:
                return train(state)
            finally:
                _destroy()
        try:
            channel.training(True)
            try:
                result = train(state)
            finally:
                channel.training(False)
        except RestartRequested:
            pass
        except Exception as error:
            channel.send("raised", reason=_one_line(error))  # first: this is the root cause
            _destroy()
            stop = channel.next_order("stop", _ORDER_TIMEOUT)
            if stop is None:
                raise  # the agent gave no word: exit as without the API
            _restart(channel, state, stop)
            continue
        else:
            if not channel.stop_pending():
                _destroy()
                return result
        _restart(channel, state, channel.next_order("stop", _ORDER_TIMEOUT))


def _form(state: State, backend: str, timeout: datetime.timedelta) -> None:
    """Form the process group; in a restarted world, every rank takes rank 0's state."""
    import tensorplay.distributed as dist

    dist.init_process_group(backend, timeout=timeout)
    if os.environ.get("TPELASTIC_RESTART_COUNT", "0") not in ("", "0"):
        state.sync()


def _restart(channel: _Channel, state: State, stop: dict[str, Any] | None) -> None:
    """The stop is taken: answer it, wait for the new world, take it and restore the state."""
    _destroy()
    if stop is None:
        raise SystemExit("tpelastic.worker: the agent's channel closed; exiting")
    channel.send("stopped", start=stop.get("start", channel.start))
    order = channel.next_order("start", _ORDER_TIMEOUT)
    if order is None:
        raise SystemExit("tpelastic.worker: no new world from the agent; exiting")
    os.environ.update({str(k): str(v) for k, v in order.get("env", {}).items()})
    channel.start = int(order.get("start", channel.start))
    os.environ[START_ENV] = str(channel.start)
    state.restore()
    state.restarts += 1
