"""The one episode loop: a policy plays reset specs on an env pool, for training and evaluation.

:func:`play_episodes` resets envs ``0..width-1`` of the pool with the first specs; then, each
step, it asks the policy for one :class:`Move` per live episode (one call for the whole batch:
one engine call, one round of HTTP requests), steps those envs together in the pool's workers
and records the step. A finished episode's env is reset with the next spec, so a list longer
than ``width`` plays through (evaluation), while a list of at most ``width`` specs plays as one
batch (the trainer's chunks). Results come back in spec order; each episode depends only on its
spec and the policy, never on how episodes were scheduled.

Its policies: the trainer's model (:class:`agentrl.rollout.loop.ModelPolicy`: prompts -> engine
-> parsed actions, keeping the exact token ids and log-probs) and the step-by-step evaluation
agents (random, expert, endpoint; :func:`agentrl.evaluation.runner.play_tasks`). This module
needs neither torch nor a model, so evaluation with those agents works from a core install.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .pool import EnvPool, ResetSpec, StepResult

__all__ = [
    "AGENT_STRIDE",
    "Episode",
    "EpisodeResult",
    "Move",
    "Policy",
    "ResetError",
    "RolloutStats",
    "StepRecord",
    "Turn",
    "agent_views",
    "play_episodes",
]

#: Multi-agent episodes: agent ``i``'s view of episode ``k`` is trajectory ``k * AGENT_STRIDE + i``.
AGENT_STRIDE = 16


@dataclass(frozen=True)
class Turn:
    """One past step: the observation acted on, the agent's response (a model's text; for an
    agent without one, the action it sent), the action read from it (``None``: none could be
    read), and the env's reward and info after it. Prompts show ``observation`` and
    ``response`` (:class:`agentrl.rollout.PromptBuilder`)."""

    observation: str
    response: str
    action: str | None = None
    reward: float = 0.0
    info: Mapping[str, Any] = field(default_factory=dict)
    agent: str | None = None  # who acted (multi-agent envs: ``info["agent"]`` before the step)


@dataclass
class StepRecord:
    """One step as the trainer keeps it: the exact tokens of the policy's move and the env's
    answer (what :func:`agentrl.rollout.to_step_batch` turns into a step-batch row)."""

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    allowed: list[list[int]] | None  # per response position, the ids sampling was restricted to
    response: str
    action: str | None
    parse_error: str
    finish_reason: str
    observation: str  # the observation the action was taken from
    state_key: Hashable
    reward: float  # the env's reward (raw; the invalid-action penalty is the credit module's)
    valid: bool  # parsed and accepted by the env
    milestones_new: int
    next_state_key: Hashable = None  # info["state_key"] of the state the step led to
    extras: dict[str, Any] = field(default_factory=dict)  # the action format's step columns
    # The policy version (learner updates done) of the weights that sampled this step's response;
    # asynchronous rollouts (rollout.staleness >= 1) read it, the synchronous loop leaves it 0.
    policy_version: int = 0
    # Per response token, the version of the weights that sampled it, where a reply spanned a
    # weight update mid-generation (``rollout.partial_rollouts``); ``None``: every token has
    # ``policy_version``. :meth:`versions` gives the per-token list either way.
    token_versions: list[int] | None = None
    # Multi-agent envs: the agent that acted (``info["agent"]``); its reward is every reward that
    # agent got from this step until its next one (``info["rewards"]``), PettingZoo's convention.
    agent: str | None = None

    def versions(self) -> list[int]:
        """The policy version of each response token."""
        if self.token_versions is not None:
            return list(self.token_versions)
        return [self.policy_version] * len(self.response_ids)


@dataclass
class EpisodeResult:
    """One played episode: its ids, steps and outcome."""

    group: int
    traj: int
    task_id: str
    category: str
    seed: int | None
    steps: list[StepRecord] = field(default_factory=list)
    won: bool = False
    score: float = 0.0
    terminated: bool = False
    truncated: bool = False
    error: str | None = None
    sampling_seed: int | None = None  # the seed its chunk sampled with (steps derive theirs)
    # The env pool's error kind (agentrl.pool.ERROR_KINDS) when an env fault cut the episode: the
    # cut step costs no invalid-action penalty and the trainer leaves the episode out of credit.
    fault: str | None = None
    # Multi-agent envs: the outcome per agent at the last step (``info["agent_won"]``,
    # ``info["agent_score"]``, ``info["returns"]``) and the seats the caller played; ``agent`` is
    # set on one agent's view of the episode (:func:`agent_views`).
    agent_won: dict[str, bool] = field(default_factory=dict)
    agent_score: dict[str, float] = field(default_factory=dict)
    agent_return: dict[str, float] = field(default_factory=dict)
    seats: list[str] = field(default_factory=list)
    agent: str | None = None
    # Agents a frozen opponent played (rollout.opponents' pool): their steps are recorded but
    # never trained, ``seats`` leaves them out, and ``won``/``score`` are the learner's seat's.
    frozen: list[str] = field(default_factory=list)
    # rewards that reached an agent before its first move, added to that move when it comes
    pending_rewards: dict[str, float] = field(default_factory=dict, repr=False)

    @property
    def total_reward(self) -> float:
        return float(sum(s.reward for s in self.steps))

    @property
    def invalid_actions(self) -> int:
        return sum(not s.valid for s in self.steps)


@dataclass
class RolloutStats:
    """Counts and times of a rollout: the loop adds ``env_s`` (stepping the pool); a model
    policy the rest (``env_s`` also holds its parsing of the responses)."""

    generate_s: float = 0.0
    env_s: float = 0.0
    prompt_s: float = 0.0
    prompt_tokens: int = 0
    response_tokens: int = 0
    engine_calls: int = 0
    prompt_overflows: int = 0
    episodes: int = 0  # episodes played
    env_errors: dict[str, int] = field(default_factory=dict)  # episodes cut by env faults, by kind
    env_restarts: int = 0  # env workers the pool restarted
    env_replayed: int = 0  # episodes the pool restored on a restarted worker by replaying them
    # counts a rollout source keeps under their own metric names (the gateway's
    # ``gateway/prefix_breaks``), logged as they are
    counters: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Move:
    """A policy's answer for one live episode.

    ``text`` is sent to the env; ``action`` is the action read from the agent's output
    (``None``: none could be read, and the step is invalid whatever the env says); ``response``
    is that output. A model policy adds the step's exact tokens (``prompt_ids``,
    ``response_ids``, ``logprobs``, ``allowed``), its ``finish_reason`` and ``parse_error``, and
    its action format's step columns (``extras``). ``cut`` ends the episode without stepping its
    env, as truncated with ``cut`` as its error (a prompt the engine could not take).
    """

    text: str
    action: str | None
    response: str = ""
    parse_error: str = ""
    finish_reason: str = ""
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    allowed: list[list[int]] | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    cut: str | None = None
    policy_version: int = 0  # the weights' version that sampled the response (a model policy's)
    # each response token's version where one reply spanned a weight update (partial rollouts)
    token_versions: list[int] | None = None


@dataclass
class Episode:
    """A live episode as a policy sees it; the loop updates it after every env step."""

    task: Any  # what it plays: the caller's task (evaluation: an EvalTask), else its ResetSpec
    slot: int  # its env in the pool
    observation: str  # the current observation
    info: dict[str, Any]  # the current info
    rng: np.random.Generator | None = None  # an agent's own randomness (set in Policy.start)
    history: list[Turn] = field(default_factory=list)
    steps: int = 0
    first_info: dict[str, Any] = field(default_factory=dict)  # the info of its reset
    memory: Any = None  # the policy's state across turns (an action format's: HiPER's subgoal)
    result: EpisodeResult | None = None  # what the loop records (play_episodes returns these)

    @property
    def instruction(self) -> str:
        if self.agent is not None:  # multi-agent: the acting agent's role
            return str(self.info.get("instruction", ""))
        return str(self.first_info.get("instruction", self.info.get("instruction", "")))

    @property
    def agent(self) -> str | None:
        """The agent that acts now (multi-agent envs' ``info["agent"]``; ``None`` otherwise)."""
        agent = self.info.get("agent")
        return agent if isinstance(agent, str) else None

    def own_history(self) -> list[Turn]:
        """The turns the acting agent took (every turn in a single-agent env): a prompt shows
        an agent its own past moves only, never another agent's observations."""
        agent = self.agent
        if agent is None:
            return self.history
        return [h for h in self.history if h.agent == agent]

    def own_steps(self) -> list[StepRecord]:
        """The recorded steps of the acting agent (all steps in a single-agent env)."""
        agent, steps = self.agent, self.result.steps if self.result is not None else []
        return steps if agent is None else [s for s in steps if s.agent == agent]

    @property
    def admissible_actions(self) -> list[str] | None:
        return self.info.get("admissible_actions")


@runtime_checkable
class Policy(Protocol):
    """What the loop asks each step: one move per live episode, in the order given."""

    def start(self, episodes: Sequence[Episode]) -> None:
        """Episodes just reset, before their first move (set up per-episode state)."""

    def act(
        self, episodes: Sequence[Episode], step: int, first_request: int | None
    ) -> Sequence[Move]:
        """The moves of ``episodes`` at loop step ``step``. ``first_request``: the number of
        live episodes before these in the global list (data-parallel lockstep), else ``None``."""


class ResetError(RuntimeError):
    """The pool could not reset these episodes' envs; ``tasks`` are what they were to play."""

    def __init__(self, message: str, tasks: list[Any]):
        super().__init__(message)
        self.tasks = tasks


class _Slots:
    """The loop's bookkeeping: live episodes by env slot, the specs still to start, results."""

    def __init__(self, pool, policy, resets, tasks, traj_offset, on_finish):
        self.pool, self.policy, self.resets, self.tasks = pool, policy, resets, tasks
        self.traj_offset, self.on_finish = traj_offset, on_finish
        self.started = 0  # specs 0..started-1 have begun
        self.live: dict[int, Episode] = {}
        self.results: list[EpisodeResult | None] = [None] * len(resets)

    def start(self, slots: Sequence[int]) -> bool:
        """Reset ``slots`` with the next specs (fewer when the list runs out); whether any began."""
        starting = list(zip(slots, range(self.started, len(self.resets))))
        self.started += len(starting)
        if not starting:
            return False
        specs = [self.resets[k] for _, k in starting]
        try:
            first = self.pool.reset(
                [slot for slot, _ in starting], [r.seed for r in specs], [r.options for r in specs]
            )
        except RuntimeError as exc:
            raise ResetError(str(exc), [self.tasks[k] for _, k in starting]) from exc
        new = []
        for (slot, k), spec, (obs, info) in zip(starting, specs, first):
            result = EpisodeResult(
                spec.group,
                self.traj_offset + k,
                str(info.get("task_id", "")),
                str(info.get("category", "")),
                spec.seed,
            )
            self.results[k] = result
            ep = Episode(self.tasks[k], slot, obs, dict(info), first_info=dict(info), result=result)
            self.live[slot] = ep
            new.append(ep)
        self.policy.start(new)
        return True

    @property
    def pending(self) -> bool:
        return self.started < len(self.resets)

    def finish(self, ep: Episode) -> None:
        del self.live[ep.slot]
        if self.on_finish is not None:
            self.on_finish(ep)


def _record(ep: Episode, move: Move, res: StepResult, max_steps: int | None) -> bool:
    """Book one env step on ``ep`` (its step record, history and outcome); whether it ended."""
    info, r = res.info, ep.result
    before = len(ep.info.get("milestones", ()) or ())
    after = len(info.get("milestones", ()) or ())
    # An env fault (the pool sets info["error"]) is no verdict on the action: only a parse
    # failure makes such a step invalid (info is then the last good step's).
    valid = move.action is not None and ("error" in info or bool(info.get("action_valid", True)))
    agent = ep.agent
    rewards = info.get("rewards") if agent is not None else None
    r.steps.append(
        StepRecord(
            prompt_ids=list(move.prompt_ids),
            response_ids=list(move.response_ids),
            logprobs=list(move.logprobs),
            allowed=move.allowed,
            response=move.response,
            action=move.action,
            parse_error=move.parse_error,
            finish_reason=move.finish_reason,
            observation=ep.observation,
            state_key=ep.info.get("state_key", ep.observation),
            reward=float(res.reward) if not isinstance(rewards, Mapping) else 0.0,
            valid=valid,
            milestones_new=max(0, after - before),
            next_state_key=info.get("state_key", res.observation),
            extras=move.extras,
            policy_version=move.policy_version,
            token_versions=move.token_versions,
            agent=agent,
        )
    )
    if isinstance(rewards, Mapping):
        _credit_agents(r, rewards)
    ep.history.append(
        Turn(ep.observation, move.response, move.action, float(res.reward), info, agent)
    )
    ep.steps += 1
    ep.observation, ep.info = res.observation, dict(info)
    r.won, r.score = bool(info.get("won", False)), float(info.get("score", 0.0))
    if agent is not None and isinstance(info.get("agent_won"), Mapping):
        r.agent_won = {str(a): bool(v) for a, v in info["agent_won"].items()}
        r.agent_score = {str(a): float(v) for a, v in info.get("agent_score", {}).items()}
        r.agent_return = {str(a): float(v) for a, v in info.get("returns", {}).items()}
        r.seats = [str(a) for a in info.get("seats", ()) if a not in r.frozen]
        if r.frozen and r.seats:  # the learner's seat's outcome, not the env's first seat's
            r.won, r.score = r.agent_won.get(r.seats[0], False), r.agent_score.get(r.seats[0], 0.0)
    if "error" in info:  # the pool cut the episode (its env raised, its worker died or hung)
        r.error = str(info["error"])
        r.fault = str(info.get("error_kind", "exception"))
    capped = max_steps is not None and ep.steps >= max_steps
    if res.terminated or res.truncated or capped or "error" in info:
        r.terminated, r.truncated = bool(res.terminated), not res.terminated
        return True
    return False


def _credit_agents(r: EpisodeResult, rewards: Mapping[str, Any]) -> None:
    """Add each agent's reward of this env step to that agent's latest step (an agent that has
    not acted yet keeps it for its first step; PettingZoo's cumulative rewards)."""
    pending = r.pending_rewards
    for a, value in rewards.items():
        value = float(value)
        if not value:
            continue
        last = next((s for s in reversed(r.steps) if s.agent == a), None)
        if last is None:
            pending[a] = pending.get(a, 0.0) + value
        else:
            last.reward += value
    step = r.steps[-1]
    if step.agent in pending:  # rewards that reached this agent before its first move
        step.reward += pending.pop(step.agent)


def agent_views(episodes: Sequence[EpisodeResult]) -> list[EpisodeResult]:
    """One trajectory per agent: a multi-agent episode becomes one result per agent that acted
    (its own steps, its own outcome), with ids that keep roles apart: group ``g`` becomes
    ``g * AGENT_STRIDE + seat`` (group baselines within a role) and trajectory ``k`` becomes
    ``k * AGENT_STRIDE + seat``. Agents a frozen opponent played (``ep.frozen``) get no view:
    only the learner's seats are trained. Single-agent episodes pass unchanged."""
    out: list[EpisodeResult] = []
    for ep in episodes:
        agents = list(dict.fromkeys(s.agent for s in ep.steps if s.agent is not None))
        if not agents or ep.agent is not None:
            out.append(ep)
            continue
        agents = [a for a in agents if a not in ep.frozen]
        order = {a: i for i, a in enumerate(ep.agent_won or agents)}
        for a in sorted(agents, key=lambda a: order.get(a, len(order))):
            seat = order.get(a, len(order))
            if seat >= AGENT_STRIDE:
                raise ValueError(f"at most {AGENT_STRIDE} agents per episode, got {a!r}")
            view = EpisodeResult(
                ep.group * AGENT_STRIDE + seat,
                ep.traj * AGENT_STRIDE + seat,
                ep.task_id,
                ep.category,
                ep.seed,
                steps=[s for s in ep.steps if s.agent == a],
                won=ep.agent_won.get(a, False),
                score=ep.agent_score.get(a, 0.0),
                terminated=ep.terminated,
                truncated=ep.truncated,
                error=ep.error,
                sampling_seed=ep.sampling_seed,
                fault=ep.fault,
                agent_won=ep.agent_won,
                agent_score=ep.agent_score,
                agent_return=ep.agent_return,
                seats=ep.seats,
                agent=a,
                frozen=ep.frozen,
            )
            out.append(view)
    return out


def _step(
    slots: _Slots,
    step: int,
    first_request: int | None,
    max_steps: int | None,
    stats: RolloutStats | None,
) -> list[int]:
    """One step of every live episode; returns the slots of those that ended, in slot order."""
    episodes = [slots.live[s] for s in sorted(slots.live)]
    moves = list(slots.policy.act(episodes, step, first_request))
    if len(moves) != len(episodes):
        raise ValueError(f"the policy gave {len(moves)} moves for {len(episodes)} episodes")
    ended: list[Episode] = []
    stepped: list[tuple[Episode, Move]] = []
    for ep, move in zip(episodes, moves):
        if move.cut is not None:  # never stepped: ends truncated, the reason in its error
            ep.result.truncated, ep.result.error = True, move.cut
            ended.append(ep)
        else:
            stepped.append((ep, move))
    if stepped:
        t0 = time.perf_counter()
        results = slots.pool.step([ep.slot for ep, _ in stepped], [m.text for _, m in stepped])
        for (ep, m), res in zip(stepped, results):
            if not _record(ep, m, res, max_steps):
                continue
            ended.append(ep)
            fault = ep.result.fault
            if stats is not None and fault is not None:  # an env fault cut it: counted by kind
                stats.env_errors[fault] = stats.env_errors.get(fault, 0) + 1
        if stats is not None:
            stats.env_s += time.perf_counter() - t0
    ended.sort(key=lambda ep: ep.slot)
    for ep in ended:
        slots.finish(ep)
    return [ep.slot for ep in ended]


def play_episodes(
    pool: EnvPool,
    policy: Policy,
    resets: Sequence[ResetSpec],
    *,
    max_steps: int | None = None,
    width: int | None = None,
    tasks: Sequence[Any] | None = None,
    traj_offset: int = 0,
    step_sync: Callable[[int], tuple[int, bool]] | None = None,
    stats: RolloutStats | None = None,
    on_finish: Callable[[Episode], None] | None = None,
) -> list[EpisodeResult]:
    """Play one episode per reset spec, at most ``width`` at once on envs ``0..width-1`` (default:
    all of them at once); returns their results in spec order.

    ``max_steps`` caps each episode (it ends as truncated); an episode also ends when its env
    terminates or truncates it, or when the pool cut it (``info["error"]``). ``tasks[k]`` is
    what episode ``k`` plays as its policy sees it (``Episode.task``; default: its spec); trajectory
    ids count from ``traj_offset``. ``on_finish`` sees each episode as it ends.

    ``step_sync`` (data-parallel runs, ``agentrl.training.data_parallel.lockstep``): called each
    step with this process's live episode count, it returns the number of live episodes before
    them in the global list and whether any is live anywhere; the policy numbers its requests
    from there, so each episode samples as it would in one process playing the whole list, and
    the loop runs until no episode is live anywhere.
    """
    width = len(resets) if width is None else int(width)
    if width > len(pool):
        raise ValueError(f"{width} episodes for a pool of {len(pool)} envs")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    if tasks is not None and len(tasks) != len(resets):
        raise ValueError(f"{len(tasks)} tasks for {len(resets)} reset specs")
    slots = _Slots(
        pool, policy, resets, list(resets if tasks is None else tasks), traj_offset, on_finish
    )
    restarts, replayed = getattr(pool, "restarts", 0), getattr(pool, "replayed", 0)
    if stats is not None:
        stats.episodes += len(resets)
    slots.start(range(width))
    # Step `horizon` is the last an episode started so far can reach (under a cap).
    step, horizon = 0, max_steps
    while horizon is None or step < horizon or slots.pending:
        first_request = None
        if step_sync is not None:
            first_request, anywhere = step_sync(len(slots.live))
            if not anywhere:
                break
        if slots.live:
            freed = _step(slots, step, first_request, max_steps, stats)
            if slots.start(freed) and max_steps is not None:
                horizon = step + 1 + max_steps
        elif step_sync is None:
            break
        step += 1
    if stats is not None:
        stats.env_restarts += getattr(pool, "restarts", 0) - restarts
        stats.env_replayed += getattr(pool, "replayed", 0) - replayed
    return list(slots.results)
