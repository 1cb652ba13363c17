"""Every simulated node runs the product's composed core: the agent table and membership machine.

The simulator decides nothing an agent decides. Each :class:`~tpelastic.core.sim.nodes.SimNode`
holds a :class:`tpelastic.core.node.NodeState` and every observation goes through
:func:`tpelastic.core.node.node_step`, as the product's run loop does. What happens to a node in
virtual time becomes the observations the adapters feed: a look's decoded replies, the node's
keep-alive, a join that found the run closed (membership events); a completed round, a failed
join, worker failures, a signal, a dead ring successor and a held failure's timer (agent
events). The effects are carried out in order through :data:`AgentDriver.HANDLERS`, keyed by
effect type. Opening an attempt needs the store: its landing is the node's next observation
(``OpenLanded``, with the keep-alive then), which starts the attempt's workers, as in the adapter.

A store call that fails goes through the store client's outage rule
(:mod:`tpelastic.core.store_outage`): the first failure of an outage is announced
(``store.outage``), calls are retried until the outage is waited out, and from then on every
failed call fails at once with one line (``SimNode.store_lost``): a join ends with it, a look
fails (the membership machine counts failed looks), an attempt's open fails.

The restart budget is the agent's: ``max_restarts`` (None: unbounded) and the collateral window
the adapter derives from the heartbeat (``heartbeat_timeout + 2 x heartbeat_interval + 0.5 s``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from operator import attrgetter
from typing import Any, ClassVar

from attrs import define, field, fields

from tpelastic.core import agent as ag
from tpelastic.core import membership as mb
from tpelastic.core.agent.states import TERMINAL
from tpelastic.core.group_values import WorkerFailure
from tpelastic.core.node import NodeConfig, NodeState, NodeStep, node_step
from tpelastic.core.rendezvous import attempts
from tpelastic.core.rendezvous import membership as rz_membership
from tpelastic.core.rendezvous.ops import JoinFailed, JoinSucceeded, Reply
from tpelastic.core.rendezvous.records import RoundResult, decode_closed
from tpelastic.core.sim.nodes import SimNode, Status, round_completed
from tpelastic.core.sim.restarting import RestartDriver
from tpelastic.core.store_outage import GiveUp, LossKind, OutagePolicy, on_failure
from tpelastic.core.values import Emit, Rejected

# The adapter's margin on the collateral window, for a loaded machine.
COLLATERAL_MARGIN = 0.5
UNBOUNDED = sys.maxsize
# A handler returns True when it holds the rest of the step (it carries it out later).
Handler = Callable[[Any, SimNode, Any, Iterator[object]], bool]
# Every field of the agent's state but the node's rank in its world (see _step's ``alike``).
_BUT_RANK = tuple(f.name for f in fields(ag.AgentState) if f.name != "group_rank")
_but_rank = attrgetter(*_BUT_RANK)
Alike = dict[tuple[object, ...], NodeStep]
# The terminal phases, compared by identity (an enum member hashes in Python: slow per member).
_SUCCEEDED, _FAILED = ag.AgentPhase.SUCCEEDED, ag.AgentPhase.FAILED
assert frozenset((_SUCCEEDED, _FAILED)) == TERMINAL


# A step another member may take again by replay: it only stops and starts workers (or notes),
# within one phase, so carrying out its effects is all the full step would do.
_REPLAYABLE = (ag.StopWorkers, ag.StartWorkers, Emit, Rejected)


def _replayable(before: NodeState, taken: NodeStep) -> bool:
    if taken.state.agent.phase is not before.agent.phase:
        return False
    return all(type(effect) in _REPLAYABLE for effect in taken.effects)


@define
class AgentDriver(RestartDriver):
    """The join and restart drivers plus each node's agent and membership machine.

    Attributes:
        max_restarts: the job's restart budget (None: unbounded).
        peer_loss_fails_workers: a crash makes the workers of every peer training in the same
            world fail ``peer_loss_delay`` later ("Connection closed by peer"), as collective
            workers do.
    """

    max_restarts: int | None = None
    peer_loss_fails_workers: bool = False
    peer_loss_delay: float = 0.05
    # The store client's patience (core.store_outage): a store that refuses connections (its
    # process died: ``store_gone``) is waited out for the keep-alive expiry, one that does not
    # answer (an outage, a partition) for ``read_timeout``.
    read_timeout: float = 60.0
    store_gone: bool = False
    _node_config: NodeConfig | None = field(default=None, alias="_node_config")
    # While members learn of an attempt together, their restarts are gathered here and done as
    # one batch (one count update, one list of held waits).
    _restart_batch: list[tuple[SimNode, RoundResult]] | None = field(
        default=None, alias="_restart_batch"
    )
    # Members learning together of one attempt share the steps of alike states (see _step);
    # off, every member steps on its own (the tests compare both).
    step_alike: bool = True
    _alike: Alike | None = field(default=None, alias="_alike")
    _alike_looks: dict[tuple[object, ...], mb.LookDone] | None = field(
        default=None, alias="_alike_looks"
    )
    _alike_keep: list[object] = field(factory=list, alias="_alike_keep")
    _last_step: NodeStep | None = field(default=None, alias="_last_step")

    HANDLERS: ClassVar[dict[type, Handler]] = {}

    # --- configuration -------------------------------------------------------------------------

    @property
    def node_config(self) -> NodeConfig:
        """What every node's core is configured with (the same spec runs on every node)."""
        if self._node_config is None:
            config = self.config
            window = config.heartbeat_timeout + 2 * config.heartbeat_interval + COLLATERAL_MARGIN
            agent = ag.AgentConfig(
                max_restarts=UNBOUNDED if self.max_restarts is None else self.max_restarts,
                min_nodes=config.min_nodes,
                max_nodes=config.max_nodes,
                restart_in_place=self.restart_in_place,
                collateral_window=window,
            )
            member = mb.MemberConfig(
                heartbeat_timeout=config.heartbeat_timeout,
                heartbeat_interval=config.heartbeat_interval,
                fence_timeout=config.join_timeout,
            )
            self._node_config = NodeConfig(agent=agent, member=member)
        return self._node_config

    @property
    def agent_config(self) -> ag.AgentConfig:
        return self.node_config.agent

    def budget_left(self, node: SimNode) -> bool:
        """Could the job restart once more, as far as this node's agent knows?"""
        return node.agent.restart_count < self.agent_config.max_restarts

    # --- stepping ------------------------------------------------------------------------------

    def _step(self, node: SimNode, observation: object, alike: Alike | None = None) -> bool:
        """Step the node's core with one observation and carry out the effects in order; True
        when the agent did something about it (it was news).

        ``alike``: the steps already taken for this same observation by members of one world
        (10,000 of them learning of one attempt). The agent table decides nothing on a node's
        rank (``tests/sim/test_sim_agents.py`` checks it row by row), so a member whose state
        equals another's but for its rank takes that member's step, with its own rank."""
        before = node.agent_but_rank
        if before.phase is _SUCCEEDED or before.phase is _FAILED or node.status is Status.CRASHED:
            return False
        step = self._node_step(node, observation, alike)
        for taken in step.agent_steps:
            if isinstance(taken.event, ag.KeepAliveLapsed) and taken.before.phase is not (
                taken.result.state.phase
            ):
                self._note(node, "node.fenced", f"{node.name} fenced itself ({taken.event.reason})")
        self._carry_out(node, iter(step.effects))
        after = node.agent_but_rank.phase
        if after is not before.phase:
            ended = after is _SUCCEEDED or after is _FAILED
            if ended and node.status not in (Status.LEFT, Status.CRASHED):
                last = step.agent_steps[-1].event if step.agent_steps else observation
                self._agent_ended(node, last)
            elif after is ag.AgentPhase.HOLDING:
                self._hold(node)
            elif after is ag.AgentPhase.FENCED:
                self._fenced(node)
        for effect in step.effects:
            if type(effect) is not Rejected:
                return True
        return False

    def _node_step(self, node: SimNode, observation: object, alike: Alike | None) -> NodeStep:
        """The node's step, which also becomes its state."""
        if alike is None:
            step = node_step(node.core, observation, self.node_config)
            node.core = step.state
            return step
        # Within one batch the observation and the member states are shared objects: keyed by
        # identity (the batch keeps them alive), compared field by field for the agent. Members
        # that already share one state object (an earlier batch's step) find it by identity.
        shared = node.shared_core
        agent = shared.agent
        rank = node.own_rank if node.own_rank is not None else agent.group_rank
        same = (id(shared), id(observation))
        taken = alike.get(same)
        self._last_step = taken
        if taken is None:
            key = (*_but_rank(agent), id(shared.member), id(observation))
            taken = alike.get(key)
            if taken is None:
                taken = alike[key] = node_step(node.core, observation, self.node_config)
                node.core = taken.state
                self._alike_keep.append(shared.member)  # its id stays this state's for the batch
            else:
                node.share_core(taken.state, rank)
            alike[same] = self._last_step = taken
            self._alike_keep.append(shared)
        else:
            node.share_core(taken.state, rank)
        return taken

    def _carry_out(self, node: SimNode, effects: Iterator[object]) -> None:
        for effect in effects:
            handler = self.HANDLERS.get(type(effect))
            if handler is None:
                raise TypeError(f"{node.name}: no handler for the agent's effect {effect!r}")
            if handler(self, node, effect, effects):
                return  # the handler carries out the rest once the store answered

    def _agent_ended(self, node: SimNode, event: object) -> None:
        code = node.agent.exit_code
        if isinstance(event, ag.RendezvousClosed):
            why = f"closed: {event.outcome}"
        else:
            why = node.agent.last_failure or "succeeded"
        status = Status.LEFT if code is not None and code >= ag.EXIT_SIGNAL_BASE else Status.FAILED
        if node.status is not status:
            self._set_status(node, status, None)
            self._drop_wait(node)
            node.gen += 1
        node.failure = why
        node.retry_pending = False
        self._note(node, "agent.ended", f"{node.name} ended (exit {code}): {why}", exit_code=code)

    # --- the store client's outage rule --------------------------------------------------------

    @property
    def outage_policy(self) -> OutagePolicy:
        return OutagePolicy(
            keep_alive_expiry=self.config.heartbeat_timeout, read_timeout=self.read_timeout
        )

    def _store_call_failed(self, node: SimNode) -> None:
        kind: LossKind = "gone" if self.store_gone else "silent"
        node.store_tries += 1
        node.outage, verdict = on_failure(
            node.outage,
            kind,
            self.now,
            self.outage_policy,
            where="the store",
            tries=node.store_tries,
        )
        if isinstance(verdict, GiveUp):
            node.store_lost = verdict.reason
        elif verdict.announce:
            self._note(node, "store.outage", f"{node.name}: {verdict.line}", line=verdict.line)

    def _store_call_ok(self, node: SimNode) -> None:
        node.outage, node.store_tries, node.store_lost = None, 0, ""

    def _look_failed(self, node: SimNode) -> None:
        """A look could not reach the store: once the outage is waited out it fails, and the
        membership machine counts it (before that, the store client is still retrying)."""
        if node.store_lost:
            self._step(node, mb.LookFailed(now=self.now, reason=node.store_lost))

    # --- what happens to a node, as the agent's events -----------------------------------------

    def _join_succeeded(self, node: SimNode, done: JoinSucceeded) -> None:
        node.joined = done
        self._step(node, round_completed(done, self.now))
        node.joined = None

    def _join_ended(self, node: SimNode, failed: JoinFailed) -> None:
        why = f"{failed.kind}: {failed.reason}"
        self._join_failed(node, why)
        if failed.kind == "closed":
            raw = self.store.get(self.keys.closed())
            record = decode_closed(raw) if raw is not None else None
            closed = (record.outcome, record.reason) if record is not None else None
            self._step(node, mb.JoinClosed(now=self.now, why=why, closed=closed))
            return
        kind = failed.kind if failed.kind in ("timeout", "corrupt") else "connection"
        rendezvous_failed = ag.RendezvousFailed(now=self.now, reason=why, kind=kind)  # type: ignore[arg-type]
        self._step(node, rendezvous_failed)

    def _look_found(
        self, node: SimNode, world: RoundResult, seen: rz_membership.RoundWatch, attempt: int
    ) -> bool:
        """A look at the round's watch keys, taken while the node ran ``attempt``, through the
        membership machine; True when it was news (the agent acted on it)."""
        # The look read whether the attempt after ``attempt`` opened; the node may have learned
        # of it (or later ones) meanwhile through its held wait.
        newer = seen.next_attempt is not None and node.attempt == attempt
        closed = (seen.closed.outcome, seen.closed.reason) if seen.closed is not None else None
        running = node.status is Status.TRAINING
        looks = self._alike_looks
        look_key = (world.round_no, id(seen), newer, running, attempt)
        look = looks.get(look_key) if looks is not None else None
        if look is None:
            look = mb.LookDone(
                now=self.now,
                round=world.round_no,
                closed=closed,
                next_opened=seen.next_opened,
                next_attempt=(attempt + 1, seen.next_attempt or "") if newer else None,
                waiting=seen.waiting,
                running=running,
            )
            if looks is not None:
                looks[look_key] = look
                self._alike_keep.append(seen)
        node.seen_attempt = attempt + 1 if newer else 0
        news = self._step(node, look, self._alike)
        node.seen_attempt = 0
        return news

    def _learned_attempt(self, members: list[tuple[SimNode, RoundResult]], attempt: int) -> None:
        """Members' held waits on the attempt key fired: each looks (its membership machine and
        agent decide); those whose agent starts the attempt restart together."""
        batch: list[tuple[SimNode, RoundResult]] = []
        self._restart_batch = batch
        if self.step_alike:
            self._alike, self._alike_looks, self._alike_keep = {}, {}, []
        # A member whose core state is the very object an earlier member of this batch held,
        # at the same store contents, takes that member's step again (replayed: its effects
        # carried out for it) when the step only restarts workers; anything else steps fully.
        replay: dict[tuple[int, int], NodeStep] = {}
        keep: list[NodeState] = []
        try:
            for node, world in members:
                shared = node.shared_core
                key = (id(shared), self.sim_store.ops)
                taken = None if node.paused else replay.get(key)
                if taken is not None:
                    rank = node.own_rank if node.own_rank is not None else shared.agent.group_rank
                    node.share_core(taken.state, rank)
                    self._carry_out(node, iter(taken.effects))
                    continue
                self._last_step = None
                self._look_held(node, world)
                taken = self._last_step
                if taken is not None and not node.paused and _replayable(shared, taken):
                    replay[key] = taken
                    keep.append(shared)  # its id stays this state's for the batch
        finally:
            self._restart_batch, self._alike, self._alike_looks, self._alike_keep = (
                None,
                None,
                None,
                [],
            )
        if batch:
            self._restart_all(batch, batch[0][1].round_no, attempt - 1, attempt)

    def _read_keep_alive(self, node: SimNode) -> None:
        """The node's keep-alive check, on its own clock: a lapse fences it."""
        self._step(node, mb.KeepAliveRead(now=self.now, last_beat=node.last_good_beat))

    def _peer_found_dead(self, node: SimNode, world: RoundResult, peer: str) -> None:
        """The ring found ``peer`` dead: report it (which opens the next round) and follow."""
        self._note(node, "node.found_dead", f"{node.name} found {peer} dead")
        self._send(node, rz_membership.report_dead_ops(self.keys, world, peer))
        node.join_reason = "membership"
        # The reason the report writes as the next round's opening (a peer's loss).
        opened = ag.NextRoundOpened(now=self.now, round=world.round_no + 1, reason="membership")
        self._step(node, opened)
        node.join_reason = ""

    def _workers_failed(self, node: SimNode, reason: str) -> None:
        failure = WorkerFailure(
            local_rank=0,
            global_rank=max(node.agent.group_rank, 0),
            exitcode=1,
            signal=None,
            at=self.now,
            reason=reason,
        )
        self._step(node, ag.WorkersFailed(now=self.now, failures=(failure,)))

    def _signalled(self, node: SimNode, signum: int) -> None:
        self._step(node, ag.SignalReceived(now=self.now, signum=signum))

    def _fenced(self, node: SimNode) -> None:
        """The agent fenced the node: out of its world, it keeps beating; each beat's outcome
        is a keep-alive read (a landed one re-joins it, see ``Cluster._send_beat``)."""
        self._set_status(node, Status.FENCED, None)
        self._drop_wait(node)
        node.gen += 1
        self._arm_tick(node)

    def _hold(self, node: SimNode) -> None:
        """The agent holds a failure (workers stopped) for the collateral window: the node keeps
        beating and looking; at the window's end the agent is told the time."""
        world = node.world
        if node.status is Status.TRAINING and world is not None:
            self._set_status(node, Status.HOLDING, world)
        until = node.agent.held_until
        agent = node.agent
        if until is None:
            return

        def window_over() -> None:
            if node.agent is agent:
                self._step(node, ag.TimePassed(now=self.now))

        self.queue.schedule(until, window_over)

    # --- the agent's effects -------------------------------------------------------------------

    def _start_workers(
        self, node: SimNode, effect: ag.StartWorkers, rest: Iterator[object]
    ) -> bool:
        done, node.joined = node.joined, None
        if done is not None:  # the round the node's join just completed
            assert done.result.round_no == effect.round
            self._complete(node, done)
            return False
        world = node.world
        if world is None or world.round_no != effect.round:
            return False
        if node.status is Status.TRAINING:
            if self._restart_batch is not None:
                self._restart_batch.append((node, world))
            elif node.attempt < effect.attempt:
                self._restart(node, world, effect.attempt)
        else:  # the open of a held attempt landed: train again as it
            node.attempt = effect.attempt
            self._set_status(node, Status.TRAINING, world)
            self._hold_all([(node, world)], world.round_no, effect.attempt)
            self._arm_tick(node)
            if self.detail:
                self._note_restart(node, world, effect.attempt)
            if self._heart_failing(node):
                self._fence_if_due(node)
        return False

    def _stop_workers(self, node: SimNode, effect: ag.StopWorkers, rest: Iterator[object]) -> bool:
        # Where the node goes next (a join, an attempt, an end) is the next effect's to say.
        return False

    def _join(self, node: SimNode, effect: ag.JoinRendezvous, rest: Iterator[object]) -> bool:
        if effect.failure:
            reason = "failure"
        elif node.join_reason:
            reason = node.join_reason
        else:
            reason = "first" if node.last_round is None else "rejoin"
        seen, node.join_reason = node.seen_attempt, ""
        # ``charged_attempt``: a peer's loss refunded the newer attempts; the join reports only
        # the charged one, so the next round's closer leaves the refunded ones out (R16).
        self._begin_join(node, reason, node.last_round, seen, effect.charged_attempt)
        return False

    def _open_next_round(
        self, node: SimNode, effect: ag.OpenNextRound, rest: Iterator[object]
    ) -> bool:
        # The join that follows opens it: a member coming straight from the previous round writes
        # ``opened`` as it registers (join_actions, OPENING_REASONS).
        node.join_reason = effect.reason
        return False

    def _open_attempt(
        self,
        node: SimNode,
        effect: ag.OpenAttempt,
        rest: Iterator[object],
        asked: float | None = None,
    ) -> bool:
        world = node.world
        if world is None or world.round_no != effect.round:
            return False
        ops = attempts.open_attempt_ops(self.keys, effect.round, effect.attempt, "failure")
        # Recovery is timed from the first failure that asked for this attempt.
        self.attempt_times.setdefault((effect.round, effect.attempt), [self.now, self.now, 0.0])
        # The handler's retries are one open to the agent: its wait counts from the first.
        agent, asked = node.agent, self.now if asked is None else asked

        def opened(replies: tuple[Reply, ...] | None) -> None:
            if node.agent is not agent or node.status is Status.CRASHED:
                return  # the agent moved on meanwhile (a look, a fence): this open is stale
            if replies is not None:
                self._carry_out(node, rest)
                landed = mb.OpenLanded(
                    now=self.now,
                    round=effect.round,
                    attempt=effect.attempt,
                    last_beat=node.last_good_beat,
                    asked_at=asked,
                )
                self._step(node, landed)
            elif self.retry_after is None or node.store_lost:
                self._open_failed_for_good(node, effect)
            else:
                self._open_later(node, effect, rest, asked)

        self._request(node, ops, opened)
        return True

    def _open_failed_for_good(self, node: SimNode, effect: ag.OpenAttempt) -> None:
        times = self.attempt_times.get((effect.round, effect.attempt))
        if times is not None and not times[2]:
            del self.attempt_times[(effect.round, effect.attempt)]  # never opened
        why = f"could not open attempt {effect.attempt} of round {effect.round}"
        if node.store_lost:
            why = f"{why}: {node.store_lost}"
        self._step(node, ag.RendezvousFailed(now=self.now, reason=why, kind="connection"))

    def _open_later(
        self, node: SimNode, effect: ag.OpenAttempt, rest: Iterator[object], asked: float
    ) -> None:
        """The store was out of reach: the handler retries the open after ``retry_after``. The
        agent's loop waits in the handler meanwhile: the workers stay stopped, the node keeps
        beating and looks at nothing."""
        world = node.world
        if node.status is Status.TRAINING and world is not None:
            self._set_status(node, Status.HOLDING, world)
        node.retry_pending = True
        agent = node.agent
        retry_after = self.retry_after or 0.0

        def retry() -> None:
            if node.agent is agent and node.status is Status.HOLDING:
                node.retry_pending = False
                self._open_attempt(node, effect, rest, asked)

        self.queue.schedule(self.now + retry_after, retry)

    def _leave(self, node: SimNode, effect: ag.LeaveRendezvous, rest: Iterator[object]) -> bool:
        if node.world is not None:
            self._send(node, rz_membership.leave_ops(self.keys, node.world, node.name))
        return False

    def _close(self, node: SimNode, effect: ag.CloseRendezvous, rest: Iterator[object]) -> bool:
        forming = (node.world.round_no + 1) if node.world else node.join.round_no
        reason = f"{effect.reason} ({node.name})"
        self._send(node, rz_membership.close_ops(self.keys, forming, effect.outcome, reason))
        self._note(
            node, "rendezvous.closed", f"{node.name} closed the rendezvous ({effect.outcome})"
        )
        return False

    def _report(self, node: SimNode, effect: ag.ReportFailure, rest: Iterator[object]) -> bool:
        return False  # the agent's terminal phase is taken up once its step is done

    def _emit(self, node: SimNode, effect: Emit, rest: Iterator[object]) -> bool:
        self._note(node, effect.name, "", **effect.as_dict())
        return False

    def _rejected(self, node: SimNode, effect: Rejected, rest: Iterator[object]) -> bool:
        # An observation the agent has no row for changes nothing (the adapter logs it).
        return False


AgentDriver.HANDLERS.update(
    {
        ag.StartWorkers: AgentDriver._start_workers,
        ag.StopWorkers: AgentDriver._stop_workers,
        ag.JoinRendezvous: AgentDriver._join,
        ag.OpenNextRound: AgentDriver._open_next_round,
        ag.OpenAttempt: AgentDriver._open_attempt,
        ag.LeaveRendezvous: AgentDriver._leave,
        ag.CloseRendezvous: AgentDriver._close,
        ag.ReportFailure: AgentDriver._report,
        Emit: AgentDriver._emit,
        Rejected: AgentDriver._rejected,
    }
)

__all__ = ["COLLATERAL_MARGIN", "UNBOUNDED", "AgentDriver"]
