"""The agent's phases, configuration, state and exit codes."""

from __future__ import annotations

import enum

from attrs import field, frozen, validators

from tpelastic.core.values import value_eq, value_hash, value_repr

# Exit codes of an agent (the process exit status of `tpelastic` for a finished agent).
EXIT_OK = 0  # the local workers succeeded
EXIT_WORKERS_FAILED = 1  # workers failed with no budget left, or the job failed elsewhere
EXIT_USAGE = 2  # reserved for the CLI: bad arguments never reach the agent
EXIT_RENDEZVOUS_FAILED = 3  # the world could not be formed (timeout, closed, connection lost)
EXIT_SIGNAL_BASE = 128  # 128 + signum: the agent was interrupted by that signal


class AgentPhase(enum.Enum):
    INIT = "INIT"  # created, not yet joined
    RENDEZVOUS = "RENDEZVOUS"  # joining / waiting for a round to complete; no local workers run
    RUNNING = "RUNNING"  # the round's workers were started and may be running
    # The workers failed with the budget spent; waiting up to the collateral window for a
    # peer's loss that would make the failure a membership change instead (workers stopped).
    HOLDING = "HOLDING"
    # The keep-alive lapsed: workers stopped, out of its world; re-joins once a heartbeat
    # lands again (the membership machine tells it).
    FENCED = "FENCED"
    EXIT_BARRIER = "EXIT_BARRIER"  # local workers succeeded; waiting for the rest of the world
    SUCCEEDED = "SUCCEEDED"  # terminal: exit code 0
    FAILED = "FAILED"  # terminal: exit code 1, 3 or 128 + signum


TERMINAL = frozenset({AgentPhase.SUCCEEDED, AgentPhase.FAILED})
LIVE = frozenset(set(AgentPhase) - TERMINAL)


def _nodes_ordered(instance: AgentConfig, _attribute: object, value: int) -> None:
    if value < instance.min_nodes:
        raise ValueError(f"max_nodes must be >= min_nodes={instance.min_nodes}, got {value!r}")


@frozen(kw_only=True)
class AgentConfig:
    """What every agent of a job agrees on (the same spec runs on every node)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    max_restarts: int = field(validator=validators.ge(0))
    min_nodes: int = field(validator=validators.ge(1))
    max_nodes: int = field(validator=_nodes_ordered)
    local_world_size: int = field(default=1, validator=validators.ge(1))
    role: str = field(default="default", validator=validators.min_len(1))
    # The rendezvous can restart a round's workers in place (attempts within a round: the
    # dynamic handler); otherwise a worker failure re-joins and a new round spends the unit.
    restart_in_place: bool = False
    # How long after a worker failure a peer's loss (a peer found dead or gone, the round
    # superseded) still counts as its cause: the latest a ring predecessor reports a peer that
    # died at the failure, plus a margin (the adapter derives it from the heartbeat). 0: never
    # held, never refunded.
    collateral_window: float = field(default=0.0, validator=validators.ge(0.0))
    # How long a node whose workers succeeded waits at the exit barrier for the others.
    exit_barrier_timeout: float = field(default=300.0, validator=validators.ge(0.0))


@frozen(kw_only=True)
class AgentState:
    """One agent's knowledge: where it is in the run and what its current world is."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    phase: AgentPhase = AgentPhase.INIT
    round: int = field(default=-1, validator=validators.ge(-1))  # -1: no round joined yet
    group_rank: int = field(default=-1, validator=validators.ge(-1))
    group_world_size: int = field(default=0, validator=validators.ge(0))
    # The job-wide count: the last round's plus the in-place attempt; never decreases.
    restart_count: int = field(default=0, validator=validators.ge(0))
    # The in-place attempt of the round the workers run (0: its first start; reset by a round).
    attempt: int = field(default=0, validator=validators.ge(0))
    local_world_size: int = field(default=1, validator=validators.ge(1))
    last_failure: str | None = None  # why the last attempt ended badly, if it did
    # HOLDING only: until when a peer's loss may still explain the held failure.
    held_until: float | None = None
    # EXIT_BARRIER only: until when this node waits for the rest of the round to arrive.
    barrier_until: float | None = None
    # The in-place attempts of this round this node started, with when (its clock): a peer's
    # loss within the collateral window of one caused it, so it is not charged.
    attempt_starts: tuple[tuple[int, float], ...] = ()
    exit_code: int | None = None  # set exactly when the phase is terminal


def initial_state(config: AgentConfig) -> AgentState:
    """The state of an agent that has not started yet."""
    return AgentState(local_world_size=config.local_world_size)


__all__ = [
    "EXIT_OK",
    "EXIT_RENDEZVOUS_FAILED",
    "EXIT_SIGNAL_BASE",
    "EXIT_USAGE",
    "EXIT_WORKERS_FAILED",
    "LIVE",
    "TERMINAL",
    "AgentConfig",
    "AgentPhase",
    "AgentState",
    "initial_state",
]
