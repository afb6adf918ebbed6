"""The multi-turn rollout loop: prompts -> engine -> parsed actions -> env pool, for live envs only.

``run_episodes`` plays one episode per reset spec in parallel: env ``k`` of the pool is reset with
spec ``k`` (a group's N rollouts share one seed, so they start from the same state). Each step,
only the envs still running are prompted; their prompts go to the backend in one call; the
responses are parsed and stepped in the env pool's workers together.

Every step keeps the exact prompt ids, response ids and sampling log-probs the engine produced,
plus (under constrained decoding) the allowed sequences, so the learner can recompute the same
distribution. Nothing is re-tokenised.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..backends.base import Backend, SamplingParams
from ..backends.trie import allowed_per_position
from ..pool import EnvPool, ResetSpec
from .parse import ActionFormat
from .prompt import PromptBuilder, Turn

__all__ = ["EpisodeResult", "ResetSpec", "RolloutStats", "StepRecord", "run_episodes"]


@dataclass
class StepRecord:
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    allowed: (
        list[list[int]] | None
    )  # per response position, the token ids sampling was restricted to
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


@dataclass
class EpisodeResult:
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
    sampling_seed: int | None = (
        None  # the seed its chunk sampled with (steps derive theirs from it)
    )
    # The env pool's error kind (agentrl.pool.ERROR_KINDS) when an env fault cut the episode: the
    # cut step costs no invalid-action penalty and the trainer leaves the episode out of credit.
    fault: str | None = None

    @property
    def total_reward(self) -> float:
        return float(sum(s.reward for s in self.steps))

    @property
    def invalid_actions(self) -> int:
        return sum(not s.valid for s in self.steps)


@dataclass
class RolloutStats:
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


class _ActionTokens:
    """Cache: response text -> its constrained response token ids (the text + stop token)."""

    def __init__(self, tokenizer, fmt: ActionFormat, stop_id: int):
        self.tokenizer, self.fmt, self.stop_id = tokenizer, fmt, stop_id
        self._cache: dict[str, tuple[int, ...]] = {}

    def __call__(self, text: str) -> tuple[int, ...]:
        ids = self._cache.get(text)
        if ids is None:
            ids = tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"]) + (
                self.stop_id,
            )
            self._cache[text] = ids
        return ids


def run_episodes(
    pool: EnvPool,
    backend: Backend,
    builder: PromptBuilder,
    fmt: ActionFormat,
    resets: Sequence[ResetSpec],
    sampling: SamplingParams,
    *,
    max_steps: int,
    constrained: bool = False,
    traj_offset: int = 0,
    stats: RolloutStats | None = None,
    step_sync: Callable[[int], tuple[int, bool]] | None = None,
) -> list[EpisodeResult]:
    """Play ``len(resets)`` episodes on envs ``0..len(resets)-1`` of ``pool``.

    ``step_sync`` (data-parallel runs, ``agentrl.training.data_parallel.lockstep``): called once per step
    with this process's live episode count, it returns the number of live episodes that come
    before them in the global list and whether any is live anywhere; the requests are numbered
    from there (``SamplingParams.request_ids``), so each episode samples exactly as it would in
    one process playing the whole list, and the loop runs until no episode is live anywhere.
    """
    n = len(resets)
    if n > len(pool):
        raise ValueError(f"{n} episodes for a pool of {len(pool)} envs")
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    stats = stats if stats is not None else RolloutStats()
    tokenizer = builder.tokenizer
    stop_id = int(tokenizer.eos_token_id)
    if stop_id not in sampling.stop_token_ids:
        sampling = SamplingParams(
            **{**sampling.__dict__, "stop_token_ids": tuple(sampling.stop_token_ids) + (stop_id,)}
        )
    action_tokens = _ActionTokens(tokenizer, fmt, stop_id)
    stats.episodes += n
    restarts, replayed = getattr(pool, "restarts", 0), getattr(pool, "replayed", 0)
    first = pool.reset(list(range(n)), [r.seed for r in resets], [r.options for r in resets])
    episodes = [
        EpisodeResult(
            r.group,
            traj_offset + k,
            str(info.get("task_id", "")),
            str(info.get("category", "")),
            r.seed,
            sampling_seed=sampling.seed,
        )
        for k, (r, (_obs, info)) in enumerate(zip(resets, first))
    ]
    obs = [o for o, _ in first]
    infos = [i for _, i in first]
    instructions = [str(i.get("instruction", "")) for i in infos]
    history: list[list[Turn]] = [[] for _ in range(n)]
    memory: list[Any] = [None] * n  # the action format's state per episode (HiPER: the subgoal)
    live = list(range(n))
    base_seed = sampling.seed
    for t in range(max_steps):
        first_id = 0
        if step_sync is not None:
            first_id, anywhere = step_sync(len(live))
            if not anywhere:
                break
            if not live:
                continue
        elif not live:
            break
        t0 = time.perf_counter()
        overflow_before = builder.overflows
        prompts = [
            builder.build(
                instructions[k],
                history[k],
                obs[k] + fmt.prompt_note(memory[k]),
                infos[k].get("admissible_actions"),
            )  # fmt: skip
            for k in live
        ]
        stats.prompt_overflows += builder.overflows - overflow_before
        allowed = None
        action_of: list[dict[tuple[int, ...], str]] = [{} for _ in live]
        if constrained:
            allowed = []
            for j, k in enumerate(live):
                acts = infos[k].get("admissible_actions")
                if acts:
                    pairs = [(action_tokens(x), a) for a in acts for x in fmt.renders(a, memory[k])]
                    action_of[j] = dict(pairs)
                    allowed.append([seq for seq, _ in pairs])
                else:
                    allowed.append(None)  # open action space: free generation
        t1 = time.perf_counter()
        step_sampling = (
            sampling
            if base_seed is None
            else SamplingParams(
                **{**sampling.__dict__, "seed": (int(base_seed) * 1_000_003 + t) & 0x7FFFFFFF}
            )
        )
        if step_sync is not None:
            step_sampling = SamplingParams(
                **{
                    **step_sampling.__dict__,
                    "request_ids": tuple(range(first_id, first_id + len(live))),
                }
            )
        gens = backend.generate(prompts, step_sampling, allowed)
        t2 = time.perf_counter()
        stats.engine_calls += 1
        # A prompt the engine could not take (longer than its context; the Generation
        # says so in extra["truncated"], see backends/vllm_engine.py) ends its episode truncated,
        # with the reason in ep.error, without stepping its env.
        cut = {j for j, g in enumerate(gens) if g.extra.get("truncated")}
        if cut:
            for j in cut:
                ep = episodes[live[j]]
                ep.truncated = True
                ep.error = f"{gens[j].extra['truncated']} ({len(prompts[j])} prompt tokens)"
            kept = [j for j in range(len(live)) if j not in cut]
            live, prompts, gens = (
                [live[j] for j in kept],
                [prompts[j] for j in kept],
                [gens[j] for j in kept],
            )
            action_of = [action_of[j] for j in kept]
            if allowed is not None:
                allowed = [allowed[j] for j in kept]
            if not live:
                stats.prompt_s += t1 - t0
                stats.generate_s += t2 - t1
                if step_sync is None:
                    break
                continue
        actions, parsed = [], []
        for j, g in enumerate(gens):
            text = tokenizer.decode(g.token_ids, skip_special_tokens=True)
            action = action_of[j].get(tuple(g.token_ids)) if action_of[j] else None
            if action is not None:
                p_action, reason = action, ""
            else:
                p = fmt.parse(text, g.finish_reason)
                p_action, reason = p.action, p.reason
            parsed.append((text, p_action, reason))
            actions.append(p_action if p_action is not None else "")
        results = pool.step(live, actions)
        t3 = time.perf_counter()
        still = []
        for j, (k, g, res) in enumerate(zip(live, gens, results)):
            text, p_action, reason = parsed[j]
            info = res.info
            before = len(infos[k].get("milestones", ()) or ())
            after = len(info.get("milestones", ()) or ())
            step_allowed = (
                allowed_per_position(allowed[j], g.token_ids)
                if allowed is not None and allowed[j] is not None
                else None
            )
            # An env fault (the pool sets info["error"]) is no verdict on the action: only a
            # parse failure makes such a step invalid; info is then the last good step's.
            valid = p_action is not None and (
                "error" in info or bool(info.get("action_valid", True))
            )
            ep = episodes[k]
            ep.steps.append(
                StepRecord(
                    prompt_ids=list(prompts[j]),
                    response_ids=list(g.token_ids),
                    logprobs=list(g.logprobs),
                    allowed=step_allowed,
                    response=text,
                    action=p_action,
                    parse_error=reason,
                    finish_reason=g.finish_reason,
                    observation=obs[k],
                    state_key=infos[k].get("state_key", obs[k]),
                    reward=float(res.reward),
                    valid=valid,
                    milestones_new=max(0, after - before),
                    next_state_key=info.get("state_key", res.observation),
                    extras=fmt.step_extras(text),
                )
            )
            memory[k] = fmt.remember(memory[k], text)
            stats.prompt_tokens += len(prompts[j])
            stats.response_tokens += len(g.token_ids)
            history[k].append(Turn(obs[k], text))
            obs[k], infos[k] = res.observation, info
            ep.won, ep.score = bool(info.get("won", False)), float(info.get("score", 0.0))
            if "error" in info:
                ep.error = str(info["error"])
                ep.fault = str(info.get("error_kind", "exception"))
                stats.env_errors[ep.fault] = stats.env_errors.get(ep.fault, 0) + 1
            if res.terminated or res.truncated or t + 1 >= max_steps:
                ep.terminated = bool(res.terminated)
                ep.truncated = not res.terminated
            else:
                still.append(k)
        live = still
        stats.prompt_s += t1 - t0
        stats.generate_s += t2 - t1
        stats.env_s += t3 - t2
    stats.env_restarts += getattr(pool, "restarts", 0) - restarts
    stats.env_replayed += getattr(pool, "replayed", 0) - replayed
    return episodes
