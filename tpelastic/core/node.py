"""One node's whole decision: the membership machine and the agent table, composed in one step.

A driver (the product's run loop, the simulator) holds one :class:`NodeState` per node and calls
:func:`node_step` with every observation, in the order it observed them; it carries out the
returned effects in order and decides nothing. The order inside one step (specs/node.md):

1. An observation of the rendezvous beyond the node's round (``LookDone``, ``LookFailed``,
   ``KeepAliveRead``, ``JoinClosed``: :data:`tpelastic.core.membership.MEMBER_EVENTS`) steps the
   membership machine first; each of its effects is an agent event.
2. Each agent event, from step 1 or observed directly (worker exits, rounds completed, signals,
   timers: :data:`tpelastic.core.agent.AGENT_EVENTS`), steps the agent table, in order. The
   agent's state holds the node's view of the restart budget (the job-wide count, the
   in-place attempt, the attempts a peer's loss may still refund: the arithmetic is
   :mod:`tpelastic.core.restart_budget`), so every budget decision is one of its rows.
3. The effects are the agent's, in order, after any ``Rejected`` of the membership machine.

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
from tpelastic.core import membership as mb
from tpelastic.core.table import Step
from tpelastic.core.values import Rejected, value_eq, value_hash, value_repr

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


@frozen(kw_only=True)
class NodeState:
    """Everything one node knows: its agent (budget included) and its membership reading."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    agent: ag.AgentState
    member: mb.MemberState = field(factory=mb.MemberState)


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
    return NodeState(agent=ag.initial_state(config.agent))


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


def node_step(state: NodeState, observation: object, config: NodeConfig) -> NodeStep:
    """Decide what the node does after one observation (see the module docstring for the order).

    Raises:
        TypeError: ``observation`` is neither an agent nor a membership event (a driver bug).
    """
    member, events, effects = _agent_events(state, observation, config)
    agent = state.agent
    taken: list[AgentStepTaken] = []
    for event in events:
        result = ag.step(agent, cast(ag.AgentEventT, event), config.agent)
        taken.append(AgentStepTaken(before=agent, event=event, result=result))
        agent = result.state
        effects += result.effects
    return NodeStep(
        state=NodeState(agent=agent, member=member), effects=effects, agent_steps=tuple(taken)
    )


def has_news(state: NodeState, observation: object, config: NodeConfig) -> bool:
    """Would ``observation`` reach the agent (an agent event, or a membership observation that
    means one)? A quiet look, a failed look short of ``looks_lost`` or a keep-alive that holds
    only updates the membership reading."""
    return bool(_agent_events(state, observation, config)[1])


__all__ = [
    "AgentStepTaken",
    "NodeConfig",
    "NodeState",
    "NodeStep",
    "has_news",
    "initial_node_state",
    "node_step",
]
