"""One node's whole decision: the membership machine, the worker group of its current start and
the agent table, composed in one step.

A driver (the product's run loop, the simulator) holds one :class:`NodeState` per node and calls
:func:`node_step` with every observation, in the order it observed them; it carries out the
returned effects in order and decides nothing. The order inside one step (specs/node.md):

1. An observation of the rendezvous beyond the node's round (``LookDone``, ``LookFailed``,
   ``KeepAliveRead``, ``JoinClosed``: :data:`tpelastic.core.membership.MEMBER_EVENTS`) steps the
   membership machine first; each of its effects is an agent event. An observation of the
   current start's workers (``GroupStarted``, ``WorkersExited``: :data:`GROUP_EVENTS`) steps
   that start's worker group (``tpelastic.core.worker_group``) instead; its verdict (a
   ``GroupFailed``, the latest with every failure; a ``GroupSucceeded``) is the agent event
   (``WorkersFailed``, ``WorkersSucceeded``). Exits of a start the agent already stopped are
   no news.
2. Each agent event, from step 1 or observed directly (worker exits, rounds completed, signals,
   timers: :data:`tpelastic.core.agent.AGENT_EVENTS`), steps the agent table, in order. The
   agent's state holds the node's view of the restart budget (the job-wide count, the
   in-place attempt, the attempts a peer's loss may still refund: the arithmetic is
   :mod:`tpelastic.core.restart_budget`), so every budget decision is one of its rows.
3. The effects are the agent's, in order, after any ``Rejected`` of the membership machine or
   the group. Carrying them forward, a ``StopWorkers`` stops the current group; after a
   ``StartWorkers`` the node has no group until ``GroupStarted`` begins that start's
   (``NodeState.group``; a driver that reports its workers to the agent directly, as the
   simulator does, never has one).

How to drive it::

    config = NodeConfig(agent=AgentConfig(...), member=MemberConfig(...))
    state = initial_node_state(config)
    done = node_step(state, AgentStarted(now=t), config)
    state = done.state          # carry out done.effects in order
    # ... then every observation: LookDone(now, round=state.agent.round, ...), WorkersFailed, ...

``NodeStep.agent_steps`` lists each agent step taken (state before, event, result) so a driver
can record them (the ``agent.step`` records replay through ``tpelastic.core.agent.step``).
:func:`has_news` says whether an observation would reach the agent at all: a driver stepping
a bounded wait between its passes (an attempt's endpoint) ends that wait on news and feeds
that observation to :func:`node_step` next, and steps any other observation at once.

Pure: time and observations come in as arguments.
"""

from __future__ import annotations

from typing import cast

from attrs import field, frozen

from tpelastic.core import agent as ag
from tpelastic.core import in_process as ip
from tpelastic.core import membership as mb
from tpelastic.core.group_values import GroupStarted, WorkerFailure, WorkerGroup, make_group
from tpelastic.core.table import Step
from tpelastic.core.values import Instant, Rejected, value_eq, value_hash, value_repr
from tpelastic.core.worker_values import WorkerState

_MEMBER_EVENTS = frozenset(mb.MEMBER_EVENTS)
_AGENT_EVENTS = frozenset(ag.AGENT_EVENTS)


@frozen(kw_only=True)
class NodeConfig:
    """What one node is configured with: the agent's config and the rendezvous's heartbeat."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    agent: ag.AgentConfig
    member: mb.MemberConfig = field(factory=mb.MemberConfig)
    in_process: ip.InProcessConfig = field(factory=ip.InProcessConfig)


@frozen(kw_only=True)
class NodeState:
    """Everything one node knows: its agent (budget included), its membership reading, the
    worker group of its current start (None before the first) and which of its workers a
    restart keeps in process (``restart``)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    agent: ag.AgentState
    member: mb.MemberState = field(factory=mb.MemberState)
    group: WorkerGroup | None = None
    restart: ip.InProcessState = field(factory=ip.InProcessState)


@frozen(kw_only=True)
class WorkersExited:
    """What one wait for the current start's workers saw: the failed ones (earliest first),
    or, with none, every worker exited with 0 (the wait ends at the first failure or when all
    succeeded)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    failures: tuple[WorkerFailure, ...] = ()


@frozen(kw_only=True)
class WorkerRaised:
    """A worker that runs ``tpelastic.worker.run`` caught an exception of its training: it
    failed, and its process lives on, waiting to be told what next."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    local_rank: int
    reason: str


GROUP_EVENTS: tuple[type, ...] = (GroupStarted, WorkersExited, WorkerRaised)
"""The observations of the current start's workers, stepped through its worker group."""
_CHANNEL_EVENTS = frozenset(ip.CHANNEL_EVENTS)


@frozen(kw_only=True)
class AgentStepTaken:
    """One step of the agent table inside a node step: the state before, the event, the result."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    before: ag.AgentState
    event: object
    result: Step[ag.AgentState]


@frozen(kw_only=True)
class NodeStep:
    """What :func:`node_step` returns: the next state and the effects to carry out, in order."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    state: NodeState
    effects: tuple[object, ...] = ()
    agent_steps: tuple[AgentStepTaken, ...] = ()


def initial_node_state(config: NodeConfig) -> NodeState:
    """The state of a node whose agent has not started yet."""
    restart = ip.InProcessState(local_world_size=config.agent.local_world_size)
    return NodeState(agent=ag.initial_state(config.agent), restart=restart)


def _agent_events(
    state: NodeState, observation: object, config: NodeConfig
) -> tuple[mb.MemberState, tuple[object, ...], tuple[object, ...]]:
    """Step 1: the member state after ``observation``, the agent events, the rejections."""
    kind = type(observation)
    if kind in _AGENT_EVENTS:
        return state.member, (observation,), ()
    if kind not in _MEMBER_EVENTS:
        raise TypeError(f"node_step: {observation!r} is neither an agent nor a member event")
    read = mb.step(state.member, observation, config.member)
    events = tuple(e for e in read.effects if not isinstance(e, Rejected))
    rejected = tuple(e for e in read.effects if isinstance(e, Rejected))
    return read.state, events, rejected


def _observed_at(observation: object) -> Instant:
    at: Instant = observation.now  # type: ignore[attr-defined]  # every observation has one
    return at


def _group_events(
    state: NodeState, observation: GroupStarted | WorkersExited | WorkerRaised, config: NodeConfig
) -> tuple[WorkerGroup | None, tuple[object, ...], tuple[object, ...]]:
    """Step 1 for the workers' observations: the group after it, the agent events (the
    group's verdict), the group's rejections."""
    group, agent = state.group, state.agent
    running = agent.phase is ag.AgentPhase.RUNNING
    if group is None and isinstance(observation, GroupStarted) and running:
        # The current start's group, from the facts its StartWorkers gave the agent.
        group = make_group(
            role=config.agent.role,
            local_world_size=agent.local_world_size,
            round=agent.round,
            restart_count=agent.restart_count,
            group_rank=agent.group_rank,
            group_world_size=agent.group_world_size,
        )
    if group is None or group.phase in (WorkerState.STOPPED, WorkerState.SUCCEEDED):
        return group, (), ()  # workers of a start the agent already stopped: nothing to decide
    # The machines are needed only once workers run: not imported on the way to the first.
    from tpelastic.core import worker as w
    from tpelastic.core import worker_group as wg

    events: list[wg.GroupEventT] = []
    if isinstance(observation, GroupStarted):
        events.append(observation)
    elif isinstance(observation, WorkerRaised):
        raised = w.WorkerExited(now=observation.now, exitcode=1, reason=observation.reason)
        events.append(wg.WorkerEvent(local_rank=observation.local_rank, event=raised))
    elif observation.failures:
        for f in observation.failures:
            code = f.exitcode if f.exitcode is not None else -1
            exited = w.WorkerExited(now=f.at, exitcode=code, signal=f.signal, reason=f.reason)
            events.append(wg.WorkerEvent(local_rank=f.local_rank, event=exited))
    else:
        clean = w.WorkerExited(now=observation.now, exitcode=0)
        ranks = range(group.local_world_size)
        events.extend(wg.WorkerEvent(local_rank=lr, event=clean) for lr in ranks)
    effects: list[object] = []
    failed: wg.GroupFailed | None = None
    succeeded = False
    for event in events:
        result = wg.step(group, event)
        group = result.state
        for effect in result.effects:
            if isinstance(effect, wg.GroupFailed):
                failed = effect  # the latest is authoritative: every failure, earliest first
            elif isinstance(effect, wg.GroupSucceeded):
                succeeded = True
            elif isinstance(effect, Rejected):
                effects.append(effect)  # its phase records are not passed on: see _follow_effects
    verdict: tuple[object, ...] = ()
    if failed is not None:
        verdict = (ag.WorkersFailed(now=observation.now, failures=failed.failures),)
    elif succeeded:
        verdict = (ag.WorkersSucceeded(now=observation.now),)
    return group, verdict, tuple(effects)


def _follow_effects(
    group: WorkerGroup | None, effects: tuple[object, ...], now: Instant
) -> WorkerGroup | None:
    """Step 3 for the worker group: a ``StopWorkers`` stops the group (its workers' later
    exits are then no news); after a ``StartWorkers`` the node has no group until that start's
    workers are reported running (``GroupStarted``)."""
    for effect in effects:
        if isinstance(effect, (ag.StopWorkers, ip.PauseWorkers)) and group is not None:
            if group.phase not in (WorkerState.STOPPED, WorkerState.SUCCEEDED):
                from tpelastic.core import worker_group as wg

                # The group's own phase records are not passed on: the agent step that
                # ordered the stop is recorded already, and the group is in the node's state.
                group = wg.step(group, wg.GroupStopped(now=now, reason=effect.reason)).state
        elif isinstance(effect, (ag.StartWorkers, ip.ResumeWorkers)):
            group = None
    return group


def _in_process(
    restart: ip.InProcessState, effects: tuple[object, ...], now: Instant, config: NodeConfig
) -> tuple[ip.InProcessState, tuple[object, ...]]:
    """Step 3 for in-process restart: the agent's ``StopWorkers`` with a new attempt of the
    same world in the same step (its ``StartWorkers``, or the ``OpenAttempt`` whose landing
    brings it) is ``RestartOrdered``; a ``StopWorkers`` otherwise is ``StopOrdered``, a
    ``StartWorkers`` alone ``StartOrdered``. The in-process table's orders take their places
    (a ``PauseWorkers`` takes the stop's; the start comes as ``ResumeWorkers`` once the kept
    workers stopped)."""
    out: list[object] = []
    held: dict[int, tuple[object, ...]] = {}  # a start's place: what goes out there
    for i, effect in enumerate(effects):
        if i in held:
            out.extend(held[i])
            continue
        event: object | None = None
        if isinstance(effect, ag.StopWorkers):
            rest = effects[i + 1 :]
            j = next((k for k, e in enumerate(rest) if isinstance(e, ag.StartWorkers)), None)
            opened = any(isinstance(e, ag.OpenAttempt) for e in rest)
            if j is not None:
                start = cast(ag.StartWorkers, rest[j])
                result = ip.step(
                    restart, ip.RestartOrdered(now=now, stop=effect, start=start), config.in_process
                )
                restart = result.state
                # A full restart keeps the agent's order; a pause holds the start back.
                *before, last = result.effects or (None,)
                if last is start:
                    out.extend(before)
                    held[i + 1 + j] = (start,)
                else:
                    out.extend(result.effects)
                    held[i + 1 + j] = ()
                continue
            elif opened:
                event = ip.RestartOrdered(now=now, stop=effect, start=None)
            else:
                event = ip.StopOrdered(now=now, stop=effect)
        elif isinstance(effect, ag.StartWorkers):
            event = ip.StartOrdered(now=now, start=effect)
        if event is None:
            out.append(effect)
            continue
        result = ip.step(restart, event, config.in_process)
        restart = result.state
        out.extend(result.effects)
    return restart, tuple(out)


def _gone(observation: object, group: WorkerGroup | None) -> frozenset[int]:
    """The local ranks whose process a workers' observation says exited."""
    if not isinstance(observation, WorkersExited):
        return frozenset()
    if observation.failures:
        return frozenset(f.local_rank for f in observation.failures)
    size = group.local_world_size if group is not None else 0
    return frozenset(range(size))


def node_step(state: NodeState, observation: object, config: NodeConfig) -> NodeStep:
    """Decide what the node does after one observation (see the module docstring for the order).

    Raises:
        TypeError: ``observation`` is none of an agent, a membership or a worker observation
            (a driver bug).
    """
    member, group, restart = state.member, state.group, state.restart
    if type(observation) in _CHANNEL_EVENTS:
        answered = ip.step(restart, observation, config.in_process)
        orders = tuple(e for e in answered.effects if not isinstance(e, Rejected))
        group = _follow_effects(group, orders, _observed_at(observation))
        new = NodeState(agent=state.agent, member=member, group=group, restart=answered.state)
        return NodeStep(state=new, effects=answered.effects)
    if isinstance(observation, (GroupStarted, WorkersExited, WorkerRaised)):
        group, events, effects = _group_events(state, observation, config)
    else:
        member, events, effects = _agent_events(state, observation, config)
    agent = state.agent
    taken: list[AgentStepTaken] = []
    for event in events:
        result = ag.step(agent, cast(ag.AgentEventT, event), config.agent)
        taken.append(AgentStepTaken(before=agent, event=event, result=result))
        agent = result.state
        effects += result.effects
    now = _observed_at(observation)
    restart, effects = _in_process(restart, effects, now, config)
    gone = _gone(observation, state.group)
    if gone:
        exited = ip.WorkersGone(now=now, local_ranks=gone)
        restart = ip.step(restart, exited, config.in_process).state
    elif isinstance(observation, GroupStarted):
        restart = ip.step(restart, ip.WorkersRunning(now=now), config.in_process).state
    group = _follow_effects(group, effects, now)
    new = NodeState(agent=agent, member=member, group=group, restart=restart)
    return NodeStep(state=new, effects=effects, agent_steps=tuple(taken))


def has_news(state: NodeState, observation: object, config: NodeConfig) -> bool:
    """Would ``observation`` reach the agent (an agent event, or a membership observation that
    means one)? A quiet look, a failed look short of ``looks_lost`` or a keep-alive that holds
    only updates the membership reading."""
    if type(observation) in _CHANNEL_EVENTS:
        return False
    if isinstance(observation, (GroupStarted, WorkersExited, WorkerRaised)):
        return bool(_group_events(state, observation, config)[1])
    return bool(_agent_events(state, observation, config)[1])


__all__ = [
    "GROUP_EVENTS",
    "AgentStepTaken",
    "NodeConfig",
    "NodeState",
    "NodeStep",
    "GroupStarted",
    "WorkerRaised",
    "WorkersExited",
    "has_news",
    "initial_node_state",
    "node_step",
]
