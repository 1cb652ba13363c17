"""Warm interpreters: a worker started from a Python that has already imported its framework.

A restarted worker spends most of its recovery importing tensorplay. The agent therefore keeps,
per local rank, spare interpreters (``warm_boot.py``) started with the job's base environment
(the worker's, without the per-attempt variables of :data:`PER_ATTEMPT`), the same interpreter
options and ``sys.path[0]``, which import the framework and wait on a socket. Starting a worker
hands a spare its full environment, argv, cwd and stdout/stderr; the spare then runs the script
as ``python script.py`` (or ``-m module``) would. After every start the pool is topped up in
the background, never by forking a process that imported anything: each spare is a fresh
interpreter, started like a worker (parent-death signal, its own session).

The decisions are functions of their inputs, tested alone: :func:`plan_for` (can this command
run warm at all), :func:`refusal` (may this spare become this worker). Anything else starts
the worker plainly: ``--no-python`` and other programs, ``-c`` (``--run-path``), a directory
or zip, an option the plan does not know, NUMA binding, or a spare whose base environment,
interpreter or script differs from the worker's. See docs/processes.md.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import threading
from collections.abc import Callable, Mapping
from typing import Any

from attrs import frozen

from tpelastic.adapters.workers import deathsig, subreaper

log = logging.getLogger("tpelastic.agent")

ENABLE_ENV = "TPELASTIC_WARM_WORKERS"
IMPORTS_ENV = "TPELASTIC_WARM_IMPORTS"
DEFAULT_IMPORTS = ("tensorplay",)
BOOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "warm_boot.py")
# Loads the boot file under a private name, so ``__main__`` stays the interpreter's own.
_LOADER = (
    "import importlib.util as u, sys\n"
    f"s = u.spec_from_file_location('_tpelastic_warm_boot', {BOOT!r})\n"
    "m = u.module_from_spec(s); sys.modules[s.name] = m; s.loader.exec_module(m)\n"
    "m.main(sys.argv[1:])\n"
)

# What a worker is told at hand-over rather than at its interpreter's start: they change with
# every attempt (ranks, the world, the store, the restart count, the attempt's files).
PER_ATTEMPT = frozenset(
    {
        "RANK",
        "WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "ROLE_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHELASTIC_RESTART_COUNT",
        "TPELASTIC_RESTART_COUNT",
        "TPELASTIC_ROUND",
        "TPELASTIC_ATTEMPT",
        "TORCHELASTIC_USE_AGENT_STORE",
        "TORCHELASTIC_ERROR_FILE",
        "TPELASTIC_ERROR_FILE",
        "TPELASTIC_PROGRESS_FILE",
        "TPELASTIC_CONTROL_START",  # the start a worker belongs to (workers/control.py)
        subreaper.MARKER,
    }
)

_PYTHON_NAME = re.compile(r"^python[0-9.]*$")
_FLAGS = frozenset({"-u", "-B", "-O", "-OO", "-s", "-S", "-E", "-I", "-b", "-bb", "-q", "-R"})
_FLAGS_WITH_VALUE = ("-W", "-X")
DEPTH_ENV = "TPELASTIC_WARM_SPARES"
_IMPORT_TIMEOUT = 300.0  # the longest a spare's import holds back the next one
DEFAULT_DEPTH = 2
DELAY_ENV = "TPELASTIC_WARM_DELAY"
# Spares import beside the first workers' own import and slow it down; a job that ends (or
# fails) within this many seconds of its first start never pays for spares it would not use.
DEFAULT_DELAY = 5.0


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether warm interpreters are on: ``TPELASTIC_WARM_WORKERS`` unset, or not 0/off."""
    value = (os.environ if environ is None else environ).get(ENABLE_ENV, "1")
    return value.strip().lower() not in ("0", "off", "false", "no")


def depth_from_env(environ: Mapping[str, str] | None = None) -> int:
    """Spares per local rank: ``TPELASTIC_WARM_SPARES`` (1 or more), else 2."""
    value = (os.environ if environ is None else environ).get(DEPTH_ENV, "")
    return int(value) if value.strip().isdigit() and int(value) > 0 else DEFAULT_DEPTH


def delay_from_env(environ: Mapping[str, str] | None = None) -> float:
    """Seconds after the pool is made before its first spare: ``TPELASTIC_WARM_DELAY``
    (0 or more), else 5."""
    value = (os.environ if environ is None else environ).get(DELAY_ENV, "").strip()
    try:
        delay = float(value) if value else DEFAULT_DELAY
    except ValueError:
        return DEFAULT_DELAY
    return delay if delay >= 0 else DEFAULT_DELAY


def imports_from_env(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The modules a spare imports: ``TPELASTIC_WARM_IMPORTS`` (comma-separated), else
    tensorplay. Modules that are not installed are left out by the spare itself."""
    value = (os.environ if environ is None else environ).get(IMPORTS_ENV)
    if value is None:
        return DEFAULT_IMPORTS
    return tuple(name.strip() for name in value.split(",") if name.strip())


@frozen
class WarmPlan:
    """How a ``python [opts] script|-m module args`` command runs in a spare."""

    python: str
    options: tuple[str, ...]
    kind: str  # "script" or "module"
    target: str  # the script path as given, or the module name
    rest: tuple[str, ...]

    def argv(self) -> list[str]:
        """``sys.argv`` before the run (``-m`` replaces [0] with the module's file, as Python)."""
        return [self.target, *self.rest]

    def path0(self, cwd: str) -> str:
        """``sys.path[0]``: the script's folder (symlinks resolved), or the cwd for ``-m``."""
        if self.kind == "module":
            return cwd
        return os.path.dirname(os.path.realpath(os.path.join(cwd, self.target)))


def plan_for(entrypoint: str, args: tuple[str, ...], *, numa: bool = False) -> WarmPlan | str:
    """The warm plan of a worker command, or the reason it starts plainly."""
    if numa:
        return "NUMA binding applies to the process before it starts"
    if not _PYTHON_NAME.match(os.path.basename(entrypoint)):
        return f"{entrypoint!r} is not a Python interpreter"
    options: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _FLAGS:
            options.append(arg)
        elif arg in _FLAGS_WITH_VALUE and i + 1 < len(args):
            options += [arg, args[i + 1]]
            i += 1
        elif arg.startswith(_FLAGS_WITH_VALUE) and len(arg) > 2:
            options.append(arg)
        elif arg == "-m" and i + 1 < len(args):
            return WarmPlan(entrypoint, tuple(options), "module", args[i + 1], args[i + 2 :])
        elif arg.startswith("-m") and len(arg) > 2:
            return WarmPlan(entrypoint, tuple(options), "module", arg[2:], args[i + 1 :])
        elif arg.startswith("-"):
            return f"interpreter option {arg!r} (inline code, stdin or unknown)"
        else:
            return WarmPlan(entrypoint, tuple(options), "script", arg, args[i + 1 :])
        i += 1
    return "no script or module"


def script_refusal(plan: WarmPlan, cwd: str) -> str | None:
    """Why ``plan``'s script cannot run warm (a folder or zip runs its ``__main__``), or None."""
    if plan.kind != "script":
        return None
    path = os.path.join(cwd, plan.target)
    if not os.path.isfile(path):
        return f"{plan.target!r} is not a file"
    try:
        with open(path, "rb") as src:
            src.seek(0, os.SEEK_END)
            src.seek(max(0, src.tell() - (1 << 16)))
            if b"PK\x05\x06" in src.read():
                return f"{plan.target!r} is a zip archive"
    except OSError as err:
        return f"{plan.target!r}: {err.strerror}"
    return None


def base_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the per-attempt variables: what a spare is started with."""
    return {k: v for k, v in env.items() if k not in PER_ATTEMPT}


def refusal(
    spare_plan: WarmPlan, spare_env: Mapping[str, str], plan: WarmPlan, env: Mapping[str, str]
) -> str | None:
    """Why the spare started for ``spare_plan``/``spare_env`` must not become the worker of
    ``plan``/``env`` (its interpreter saw a different start), or None when it may."""
    if spare_plan != plan:
        return "the command changed"
    wanted = base_env(env)
    if wanted != dict(spare_env):
        changed = sorted(k for k in {*wanted, *spare_env} if wanted.get(k) != spare_env.get(k))
        return "the environment changed: " + ", ".join(changed[:5])
    return None


class Spare:
    """One waiting interpreter: its process, its end of the socket, what it was started as.

    Its one-byte report is read through a copy of the socket's descriptor that only
    :meth:`report` reads and closes (under a lock), so the pool's waiter and a start may ask at
    once, and a hand-over or discard may close the socket itself meanwhile: the copy stays
    valid, and wakes when the spare reports, exits, or closes its end after a hand-over.
    """

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        link: socket.socket,
        plan: WarmPlan,
        env: dict[str, str],
        cwd: str,
    ) -> None:
        self.popen = popen
        self.link = link
        self.plan = plan
        self.env = env
        self.cwd = cwd
        self._ready: bool | None = None  # its one report, once read
        self._reading = threading.Lock()
        self._report_fd: int | None = os.dup(link.fileno())

    @property
    def pid(self) -> int:
        return self.popen.pid

    def report(self, timeout: float = 0.0) -> bool | None:
        """True once it has imported, False if an import failed or it died, None while it is
        still importing (after ``timeout`` s of waiting; at once while another thread waits)."""
        if not self._reading.acquire(blocking=timeout > 0):
            return self._ready  # the pool's waiter is reading it
        try:
            if self._ready is None and self._report_fd is not None:
                self._ready = self._read(self._report_fd, timeout)
                if self._ready is not None:
                    self._close_report()
            return self._ready
        finally:
            self._reading.release()

    def _read(self, fd: int, timeout: float) -> bool | None:
        from tpelastic.adapters.workers.context import wait_handles

        if not wait_handles([fd], timeout):
            return False if self.popen.poll() is not None else None
        try:
            return os.read(fd, 1) == b"R"
        except OSError:
            return False

    def _close_report(self) -> None:
        if self._report_fd is not None:
            os.close(self._report_fd)
            self._report_fd = None

    def hand_over(self, env: Mapping[str, str], cwd: str, out_fd: int, err_fd: int) -> bool:
        """Make it the worker: its environment, cwd, argv and output; False if it is gone."""
        order = {
            "env": dict(env),
            "spawn_env": self.env,
            "cwd": cwd,
            "argv": self.plan.argv(),
            "kind": self.plan.kind,
            "target": self.plan.target,
            "path0": self.plan.path0(cwd),
        }
        try:
            socket.send_fds(self.link, [json.dumps(order).encode()], [out_fd, err_fd])
        except OSError:
            return False
        finally:
            self.link.close()
            self._release_report()
        return True

    def _release_report(self) -> None:
        # A waiter reading the copy closes it itself once the spare's end closes.
        if self._reading.acquire(blocking=False):
            try:
                self._close_report()
            finally:
                self._reading.release()

    def discard(self) -> None:
        """Stop it (it has run nothing of the job's) and reap it."""
        self.link.close()
        try:
            self.popen.kill()
        except ProcessLookupError:
            pass
        try:
            self.popen.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            log.warning("warm interpreter %d did not exit after SIGKILL", self.pid)
        self._release_report()


class WarmPool:
    """The spares of one agent: up to ``depth`` per local rank, topped up after every start.

    A start takes the oldest spare of its rank, ready or still importing (the hand-over waits
    in the spare, not in the agent); two spares per rank serve two starts closer together
    than one import takes.

    Args:
        launch: runs a callable on the thread that forks the workers (the parent-death signal
            follows the forking thread) and returns its result.
        imports: the modules each spare imports before it waits.
        depth: spares kept per local rank.
        delay: seconds from the pool's first start to its first spare; starts before then
            are plain ones.
    """

    def __init__(
        self,
        launch: Callable[[Callable[[], Any]], Any],
        imports: tuple[str, ...] = DEFAULT_IMPORTS,
        *,
        depth: int = DEFAULT_DEPTH,
        delay: float = 0.0,
    ) -> None:
        self._launch = launch
        self._imports = imports
        self._depth = max(1, depth)
        self._delay = max(0.0, delay)
        self._closing = threading.Event()  # ends the delay at close
        self._ready = threading.Event()  # set once spares may be made
        self._armed = False
        if not self._delay:
            self._ready.set()
        self._lock = threading.Lock()
        self._spares: dict[int, list[Spare]] = {}
        self._pending: dict[int, int] = {}  # spares being made, per rank
        self._closed = False
        self._ranks_started: set[int] = set()
        self.started = 0  # spares made
        self.used = 0  # workers started from one

    def spares(self, local_rank: int) -> list[Spare]:
        """This rank's spares now, oldest first."""
        with self._lock:
            return list(self._spares.get(local_rank, ()))

    def take(
        self, local_rank: int, plan: WarmPlan, env: Mapping[str, str], cwd: str
    ) -> Spare | None:
        """The oldest spare that may become this worker, removed from the pool; None if there
        is none. Spares that may not (another environment, a failed import) are discarded.

        A rank's first start takes only a spare that has imported: it would otherwise wait
        for an import a plain start might not make (a job that does not import tensorplay);
        the spare stays for the next start. Later starts take one still importing."""
        with self._lock:
            first = local_rank not in self._ranks_started
            self._ranks_started.add(local_rank)
            arm, self._armed = not self._armed and not self._ready.is_set(), True
        if arm:
            self._arm_delay()
        while True:
            with self._lock:
                queue = self._spares.get(local_rank, [])
                spare = queue[0] if queue else None
                if spare is not None and first and spare.report() is not True:
                    return None  # kept, unless it failed: discarded by a later start
                if spare is not None:
                    queue.pop(0)
            if spare is None:
                return None
            why = refusal(spare.plan, spare.env, plan, env) or (
                "the cwd changed" if spare.cwd != cwd else None
            )
            if why is None and spare.report() is False:
                why = "an import failed, or it died"
            if why is None:
                self.used += 1
                return spare
            log.debug("local rank %d: warm interpreter %d refused: %s", local_rank, spare.pid, why)
            spare.discard()

    def _arm_delay(self) -> None:
        def wait() -> None:
            self._closing.wait(self._delay)
            self._ready.set()

        threading.Thread(target=wait, name="warm-delay", daemon=True).start()

    def refill(
        self, local_rank: int, plan: WarmPlan, env: Mapping[str, str], cwd: str, count: int = 0
    ) -> None:
        """Make this rank's spares for ``plan``/``env`` in the background: ``count`` of them,
        or (0) as many as it takes to hold ``depth``."""
        why = script_refusal(plan, cwd)
        if why is not None:
            log.debug("local rank %d: no warm interpreter: %s", local_rank, why)
            return
        spare_env = base_env(env)
        with self._lock:
            if self._closed:
                return
            held = len(self._spares.get(local_rank, ())) + self._pending.get(local_rank, 0)
            wanted = count or max(0, self._depth - held)
            self._pending[local_rank] = self._pending.get(local_rank, 0) + wanted
        if wanted:
            self._make_later(local_rank, plan, spare_env, cwd, wanted)

    def _make_later(
        self, local_rank: int, plan: WarmPlan, env: dict[str, str], cwd: str, count: int
    ) -> None:
        """Make ``count`` spares one after the other: the next once the one before imported,
        so a rank's spares do not share the CPU with each other (nor with the first start's)."""

        def make() -> None:
            self._ready.wait()  # set by the delay's end or by close (then nothing is made)
            for left in range(count, 0, -1):
                spare: Spare | None = None
                try:
                    with self._lock:
                        closed = self._closed
                    if not closed:
                        spare = self._launch(lambda: self._spawn(plan, env, cwd))
                except (OSError, TimeoutError) as err:
                    log.debug("local rank %d: no warm interpreter: %s", local_rank, err)
                with self._lock:
                    self._pending[local_rank] -= 1
                    keep = spare is not None and not self._closed
                    if keep:
                        assert spare is not None
                        self._spares.setdefault(local_rank, []).append(spare)
                    if spare is None or not keep:
                        self._pending[local_rank] -= left - 1  # the rest are not made
                if spare is not None and not keep:
                    spare.discard()
                if not keep:
                    return
                if left > 1:
                    assert spare is not None
                    spare.report(_IMPORT_TIMEOUT)

        threading.Thread(target=make, name=f"warm-{local_rank}", daemon=True).start()

    def _spawn(self, plan: WarmPlan, env: dict[str, str], cwd: str) -> Spare:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [
            *deathsig.prefix(os.getpid()),
            plan.python,
            *plan.options,
            "-c",
            _LOADER,
            str(theirs.fileno()),
            plan.path0(cwd),
            ",".join(self._imports),
            # Unused by the spare: its command line names what it will run, for ps and for
            # tools that find workers by their script.
            "--",
            *(["-m"] if plan.kind == "module" else []),
            *plan.argv(),
        ]
        try:
            popen = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        self.started += 1
        return Spare(popen, ours, plan, env, cwd)

    def close(self) -> None:
        """Stop every spare; no new one is made after this."""
        self._closing.set()
        with self._lock:
            self._closed = True
            spares = [spare for queue in self._spares.values() for spare in queue]
            self._spares = {}
        for spare in spares:
            spare.discard()


__all__ = [
    "BOOT",
    "DEFAULT_DELAY",
    "DEFAULT_DEPTH",
    "DELAY_ENV",
    "DEPTH_ENV",
    "ENABLE_ENV",
    "IMPORTS_ENV",
    "PER_ATTEMPT",
    "Spare",
    "WarmPlan",
    "WarmPool",
    "base_env",
    "delay_from_env",
    "depth_from_env",
    "enabled",
    "imports_from_env",
    "plan_for",
    "refusal",
    "script_refusal",
]
