"""SubprocessContext: workers that run a command (``python -u train.py ...`` or any binary).

Each worker is started through a short prefix that arms the parent-death signal (see
``deathsig.py``) in a new session, so it leads its own process group and dies with its agent. A
redirected stream goes straight to its file; a teed stream goes through a pipe that a pump copies
to the file and, prefixed, to the console.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import IO, Any

from tpelastic.adapters.workers import deathsig
from tpelastic.adapters.workers.context import PContext, WorkerHandle
from tpelastic.adapters.workers.logs import RankFiles


class _PopenWorker(WorkerHandle):
    def __init__(self, local_rank: int, popen: subprocess.Popen[bytes]) -> None:
        super().__init__(local_rank, popen.pid)
        self.popen = popen
        self._fd: int | None = _exit_fd(popen)

    def wait_handle(self) -> Any:
        return self._fd

    def reap(self, timeout: float) -> int | None:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _exit_fd(popen: subprocess.Popen[bytes]) -> int:
    """An fd that becomes readable when ``popen`` exits.

    A pidfd (Linux 5.3+) costs nothing. Elsewhere a small thread waits for the process and then
    writes to a pipe, so the watcher can still block on one set of fds.
    """
    try:
        return os.pidfd_open(popen.pid)
    except (AttributeError, OSError):
        read_fd, write_fd = os.pipe()

        def wait_then_signal() -> None:
            popen.wait()
            os.write(write_fd, b"x")
            os.close(write_fd)

        threading.Thread(target=wait_then_signal, name=f"exit-{popen.pid}", daemon=True).start()
        return read_fd


class SubprocessContext(PContext):
    """Workers started as commands, each with its own argument tuple.

    Args:
        name: the role name used in console prefixes.
        entrypoint: the command (a name on PATH or a path).
        args: per local rank, the command's arguments.
        envs: per local rank, the extra environment.
        files: per local rank, where its logs go.
        attempt_dir: the attempt folder.
    """

    def __init__(
        self,
        name: str,
        entrypoint: str,
        args: dict[int, tuple[str, ...]],
        envs: dict[int, dict[str, str]],
        files: dict[int, RankFiles],
        attempt_dir: str,
    ) -> None:
        super().__init__(name, entrypoint, envs, files, attempt_dir)
        self.args = {rank: tuple(str(a) for a in value) for rank, value in args.items()}

    def _start_one(self, local_rank: int) -> WorkerHandle:
        files = self.files[local_rank]
        argv = [*deathsig.prefix(os.getpid()), self.entrypoint]
        out, out_pipe = self._stream(files.stdout, files.tee_stdout)
        err, err_pipe = self._stream(files.stderr, files.tee_stderr)
        try:
            popen = subprocess.Popen(
                [*argv, *self.args[local_rank]],
                env=self.worker_env(local_rank),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        finally:
            for stream in (out, err):
                if isinstance(stream, int) and stream > 2:
                    os.close(stream)
                elif stream is not None and not isinstance(stream, int):
                    stream.close()
        self._pump(local_rank, out_pipe, files.stdout, sys.stdout)
        self._pump(local_rank, err_pipe, files.stderr, sys.stderr)
        return _PopenWorker(local_rank, popen)

    @staticmethod
    def _stream(path: str, tee: bool) -> tuple[IO[bytes] | int | None, int | None]:
        """What to give Popen for one stream, and the read end of its pipe when teed."""
        if not path:
            return None, None
        if tee:
            read_fd, write_fd = os.pipe()
            return write_fd, read_fd
        return open(path, "ab"), None  # handed to the child, closed right after

    def _pump(self, local_rank: int, read_fd: int | None, path: str, console: IO[str]) -> None:
        if read_fd is None:
            return
        from tpelastic.adapters.workers.tee import StreamPump, console_fd, line_prefix

        rank = self.envs[local_rank].get("RANK", "")
        prefix = line_prefix(self.name, local_rank, int(rank) if rank.isdigit() else None)
        log = open(path, "ab")  # owned and closed by the pump
        self._pumps.append(StreamPump(read_fd, log, console_fd(console), prefix).start())


__all__ = ["SubprocessContext"]
