"""LocalElasticAgent: the run loop with workers as local processes (``start_processes``)."""

from __future__ import annotations

import os
import signal
from typing import Any

from tpelastic.adapters.agent.loop import SimpleElasticAgent
from tpelastic.adapters.agent.spec import WorkerSpec
from tpelastic.adapters.workers.api import RunProcsResult
from tpelastic.adapters.workers.context import PContext
from tpelastic.adapters.workers.start import start_processes


class LocalElasticAgent(SimpleElasticAgent):
    """Runs ``spec.local_world_size`` worker processes on this node, restarting them as told.

    Commands (``spec.entrypoint`` a string) run as subprocesses with ``spec.args``; callables run
    through multiprocessing with ``spec.start_method`` and ``spec.args`` as their arguments.
    Workers never outlive the agent (see docs/processes.md).
    """

    def __init__(self, spec: WorkerSpec) -> None:
        super().__init__(spec)
        self._ctx: PContext | None = None

    def _start_workers(self, envs: dict[int, dict[str, str]], attempt: str) -> None:
        spec = self._spec
        target = spec.target
        if spec.local_world_size > 1 and "OMP_NUM_THREADS" not in os.environ:
            # Several workers share this node's cores: one thread each unless the user decides.
            envs = {rank: {**env, "OMP_NUM_THREADS": "1"} for rank, env in envs.items()}
        args: Any = tuple(spec.args)
        if callable(target):
            args = {rank: tuple(spec.args) for rank in envs}
        self._ctx = start_processes(
            name=spec.role,
            entrypoint=target,
            args=args,
            envs=envs,
            log_dir=spec.log_dir,
            start_method=spec.start_method,
            redirects=spec.redirects,
            tee=spec.tee,
            attempt=attempt,
            local_ranks_filter=spec.local_ranks_filter,
        )

    def _stop_workers(self, reason: str) -> None:
        ctx, self._ctx = self._ctx, None
        if ctx is not None:
            ctx.close(death_sig=signal.SIGTERM, timeout=self._spec.close_timeout)

    def _wait_workers(self, timeout: float) -> RunProcsResult | None:
        if self._ctx is None:
            raise RuntimeError("agent: no workers to wait for")
        return self._ctx.wait(timeout=timeout, period=timeout)

    def _current_context(self) -> PContext | None:
        return self._ctx

    def _live_local_ranks(self) -> tuple[int, ...]:
        # A pid that no longer exists is a worker that ended (its exit is reaped at once); a
        # worker that finished its part must not be reported stuck while its peers go on.
        live = []
        for rank, pid in self._worker_pids().items():
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            except PermissionError:
                pass
            live.append(rank)
        return tuple(live)

    def _worker_pids(self) -> dict[int, int]:
        return self._ctx.pids() if self._ctx is not None else {}

    def worker_pids(self) -> dict[int, int]:
        """Local rank -> pid of the current attempt's workers (empty when none run)."""
        return self._worker_pids()


__all__ = ["LocalElasticAgent"]
