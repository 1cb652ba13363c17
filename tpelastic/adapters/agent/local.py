"""LocalElasticAgent: the run loop with workers as local processes (``start_processes``)."""

from __future__ import annotations

import logging
import os
import signal
from typing import TYPE_CHECKING, Any

from attrs import evolve

from tpelastic.adapters.agent.loop import SimpleElasticAgent
from tpelastic.adapters.agent.spec import RunResult, WorkerSpec
from tpelastic.adapters.workers.api import RunProcsResult
from tpelastic.adapters.workers.context import PContext
from tpelastic.adapters.workers.logs import make_run_dir, make_temp_dir, remove_tree
from tpelastic.adapters.workers.start import start_processes

if TYPE_CHECKING:
    from tpelastic.adapters.workers.logs import LogsSpecs
    from tpelastic.adapters.workers.warm import WarmPool

log = logging.getLogger("tpelastic.agent")


def substitute_local_rank(args: tuple[Any, ...], local_rank: int) -> tuple[str, ...]:
    """``args`` with ``${local_rank}`` (and ``$local_rank``) replaced, as torch's agent does
    for a command's arguments (``macros.substitute``); other ``$`` text is left alone."""
    from string import Template

    return tuple(Template(str(a)).safe_substitute(local_rank=str(local_rank)) for a in args)


def _is_plugin(logs_specs: object) -> bool:
    from tpelastic.adapters.workers.logs import LogsSpecs

    return logs_specs is not None and type(logs_specs) is not LogsSpecs


def prefixes(template: str | None, role: str, envs: dict[int, dict[str, str]]) -> dict[int, str]:
    """Each rank's teed-line prefix from torch's ``log_line_prefix_template`` (``${role_name}``,
    ``${rank}``, ``${local_rank}``); empty without a template."""
    if not template:
        return {}
    from string import Template

    return {
        rank: Template(template).safe_substitute(
            role_name=role, rank=env.get("RANK", ""), local_rank=rank
        )
        for rank, env in envs.items()
    }


def virtual_local_rank_envs(envs: dict[int, dict[str, str]]) -> dict[int, dict[str, str]]:
    """torch's ``--virtual-local-rank``: every worker sees ``LOCAL_RANK=0`` and its own device
    as the only visible one (``CUDA_VISIBLE_DEVICES``: the rank's entry of the agent's list,
    else the local rank); the real local rank stays in ``TPELASTIC_LOCAL_RANK``.

    Raises:
        ValueError: a local rank beyond the agent's ``CUDA_VISIBLE_DEVICES`` (as torch).
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = visible.split(",") if visible is not None else None
    out = {}
    for rank, env in envs.items():
        if devices is not None and rank >= len(devices):
            raise ValueError(
                f"local_rank {rank} exceeds available GPUs in CUDA_VISIBLE_DEVICES={visible}"
            )
        device = devices[rank].strip() if devices is not None else str(rank)
        out[rank] = {
            **env,
            "LOCAL_RANK": "0",
            "TPELASTIC_LOCAL_RANK": str(rank),
            "CUDA_VISIBLE_DEVICES": device,
        }
    return out


def _asked_for_logs(choice: Any) -> bool:
    if isinstance(choice, dict):
        return any(int(v) for v in choice.values())
    if isinstance(choice, str):
        return choice.strip() not in ("", "0")
    return bool(int(choice))


class LocalElasticAgent(SimpleElasticAgent):
    """Runs ``spec.local_world_size`` worker processes on this node, restarting them as told.

    Commands (``spec.entrypoint`` a string) run as subprocesses with ``spec.args``; callables run
    through multiprocessing with ``spec.start_method`` and ``spec.args`` as their arguments.
    Workers never outlive the agent (see docs/processes.md).

    The arguments after ``spec`` are torch's; each one given overrides the spec's setting
    (None keeps it): ``logs_specs`` its ``log_dir``/``redirects``/``tee``, ``start_method``,
    ``exit_barrier_timeout``, and ``shutdown_timeout`` its ``close_timeout``.
    ``log_line_prefix_template`` is kept for the teed lines' prefix; ``health_check_server`` and
    ``uninterruptible_state_timeout`` are accepted and unused (the health endpoint is
    ``spec.health_port``).
    """

    def __init__(
        self,
        spec: WorkerSpec,
        logs_specs: LogsSpecs | None = None,
        start_method: str | None = None,
        exit_barrier_timeout: float | None = None,
        log_line_prefix_template: str | None = None,
        shutdown_timeout: float | None = None,
        health_check_server: object | None = None,
        uninterruptible_state_timeout: float | None = None,
    ) -> None:
        changes: dict[str, Any] = {}
        # A LogsSpecs of another class (a ``torchrun.logs_specs`` plugin) lays out the files
        # itself; ours is folded into the spec, under this run's own folder.
        self._plugin_logs = logs_specs if _is_plugin(logs_specs) else None
        if logs_specs is not None and self._plugin_logs is None:
            changes.update(
                log_dir=logs_specs.log_dir, redirects=logs_specs.redirects, tee=logs_specs.tee
            )
        if start_method is not None:
            changes["start_method"] = start_method
        super().__init__(
            evolve(spec, **changes) if changes else spec,
            exit_barrier_timeout=exit_barrier_timeout,
            shutdown_timeout=shutdown_timeout,
        )
        self.log_line_prefix_template = log_line_prefix_template
        self._ctx: PContext | None = None
        self._run_dir: str | None = None  # <log_dir or a temp folder>/<run id>_<random>
        self._temp_root: str | None = None  # the temp folder we made, when log_dir is None
        self._warm: WarmPool | None = None  # made at the first start, when warm workers are on

    def _warm_pool(self) -> WarmPool | None:
        """This agent's warm interpreters (see ``workers/warm.py``), or None when they are off
        (``WorkerSpec.warm_workers``, ``TPELASTIC_WARM_WORKERS=0``) or the workers are
        callables."""
        if self._warm is None and self._spec.warm_workers and isinstance(self._spec.target, str):
            from tpelastic.adapters.workers import warm
            from tpelastic.adapters.workers.context import on_launcher_thread

            if warm.enabled():
                self._warm = warm.WarmPool(
                    on_launcher_thread,
                    warm.imports_from_env(),
                    depth=warm.depth_from_env(),
                    delay=warm.delay_from_env(),
                )
        return self._warm

    def run(self, role: str = "default") -> RunResult:
        try:
            return super().run(role)
        finally:
            self._stop_spares()  # if the run ended before its own teardown
            self._remove_temp_logs()

    def _stop_spares(self) -> None:
        if self._warm is not None:
            self._warm.close()

    def _log_dir_for(self, envs: dict[int, dict[str, str]]) -> str:
        """This run's own folder: every attempt of this agent writes under it, and a second
        run into the same ``log_dir`` gets another (as torchrun's ``<run id>_<random>``)."""
        if self._run_dir is None:
            base = self._spec.log_dir
            if base is None:
                base = self._temp_root = make_temp_dir("tpelastic_")
            run_id = next(iter(envs.values()), {}).get("TORCHELASTIC_RUN_ID", "run")
            self._run_dir = make_run_dir(base, run_id)
        return self._run_dir

    def _remove_temp_logs(self) -> None:
        # A temp folder we made goes, unless it holds logs the user asked for (--redirects or
        # --tee without --log-dir: kept, as torchrun keeps its own, and said where).
        root, self._temp_root = self._temp_root, None
        if root is None:
            return
        spec = self._spec
        if _asked_for_logs(spec.redirects) or _asked_for_logs(spec.tee):
            log.info("worker logs are in %s", self._run_dir)
            return
        remove_tree(root)

    def _local_envs_and_args(self, envs: dict[int, dict[str, str]]) -> tuple[dict[int, Any], Any]:
        """The round's worker envs with this node's additions, and the workers' arguments."""
        spec = self._spec
        if spec.local_world_size > 1 and "OMP_NUM_THREADS" not in os.environ:
            # Several workers share this node's cores: one thread each unless the user decides.
            envs = {rank: {**env, "OMP_NUM_THREADS": "1"} for rank, env in envs.items()}
        args: Any = tuple(spec.args)
        if callable(spec.target):
            args = {rank: tuple(spec.args) for rank in envs}
        elif any("$" in str(a) for a in spec.args):
            args = {rank: substitute_local_rank(spec.args, rank) for rank in envs}
        if spec.virtual_local_rank:
            envs = virtual_local_rank_envs(envs)
        return envs, args

    def _start_workers(self, envs: dict[int, dict[str, str]], attempt: str) -> None:
        spec = self._spec
        target = spec.target
        envs, args = self._local_envs_and_args(envs)
        common: dict[str, Any] = dict(
            name=spec.role,
            entrypoint=target,
            args=args,
            envs=envs,
            log_line_prefixes=prefixes(self.log_line_prefix_template, spec.role, envs),
            start_method=spec.start_method,
            numa_options=spec.numa_options,
            duplicate_stdout_filters=spec.duplicate_stdout_filters,
            duplicate_stderr_filters=spec.duplicate_stderr_filters,
        )
        if self._plugin_logs is not None:
            warm = self._warm_pool()
            self._ctx = start_processes(logs_specs=self._plugin_logs, warm=warm, **common)
            return
        self._ctx = start_processes(
            **common,
            log_dir=self._log_dir_for(envs),
            redirects=spec.redirects,
            tee=spec.tee,
            attempt=attempt,
            local_ranks_filter=spec.local_ranks_filter,
            warm=self._warm_pool(),
        )

    def _control_channels_factory(self) -> Any | None:
        from tpelastic.adapters.workers.control import ControlChannels

        return ControlChannels

    def _stop_worker(self, local_rank: int) -> None:
        if self._ctx is not None:
            self._ctx.stop_one(local_rank, timeout=self._spec.close_timeout)

    def _respawn_worker(self, local_rank: int, env: dict[str, str]) -> None:
        if self._ctx is None:
            raise RuntimeError("agent: no workers to respawn one of")
        envs, _ = self._local_envs_and_args({local_rank: env})
        self._ctx.replace(local_rank, envs[local_rank])

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
