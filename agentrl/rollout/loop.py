"""The trainer's side of the episode loop: a model policy, and ``run_episodes`` that plays with it.

``run_episodes`` plays one episode per reset spec in parallel through the one episode loop
(:func:`agentrl.episodes.play_episodes`): env ``k`` of the pool is reset with spec ``k`` (a
group's N rollouts share one seed, so they start from the same state). Each step,
:class:`ModelPolicy` prompts only the envs still running; their prompts go to the backend in one
call; the responses are parsed, and the loop steps the env pool's workers together.

Every step keeps the exact prompt ids, response ids and sampling log-probs the engine produced,
plus (under constrained decoding) the allowed sequences, so the learner can recompute the same
distribution. Nothing is re-tokenised. Under ``rollout.prompt.context=tokens`` the next step's
prompt also extends these exact ids (:meth:`agentrl.rollout.PromptBuilder.extend`).

The action format is bound to each episode (:meth:`ActionFormat.bind` with its reset info: the
tool-call format takes the env's tools from there).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..backends.base import Backend, Generation, SamplingParams
from ..backends.trie import allowed_per_position
from ..episodes import (
    Episode,
    EpisodeResult,
    Move,
    RolloutStats,
    StepRecord,
    play_episodes,
)
from ..pool import EnvPool, ResetSpec
from .parse import ActionFormat
from .prompt import PromptBuilder

__all__ = [
    "EpisodeResult",
    "ModelPolicy",
    "ResetSpec",
    "RolloutStats",
    "StepRecord",
    "run_episodes",
]


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


def _token_versions(g: Generation) -> list[int] | None:
    """Each token's weight version where a reply spanned an update (``extra["token_versions"]``
    of the fleet's partial rollouts, one per token); ``None`` where one version sampled them all."""
    tv = g.extra.get("token_versions")
    if not tv or len(tv) != len(g.token_ids) or len(set(tv)) == 1:
        return None
    return [int(v) for v in tv]


def _with(sampling: SamplingParams, **changes: Any) -> SamplingParams:
    return SamplingParams(**{**sampling.__dict__, **changes})


class ModelPolicy:
    """A model behind ``backend`` as the episode loop's policy: per step, every live episode's
    prompt (``builder``, with ``fmt``'s note), one engine call, the responses parsed by ``fmt``
    (under ``constrained`` decoding, restricted to the admissible actions as ``fmt`` writes
    them). Step ``t`` samples with ``(sampling.seed * 1_000_003 + t) & 0x7FFFFFFF``."""

    def __init__(
        self,
        backend: Backend,
        builder: PromptBuilder,
        fmt: ActionFormat,
        sampling: SamplingParams,
        *,
        constrained: bool = False,
        stats: RolloutStats | None = None,
    ):
        self.backend, self.builder, self.fmt = backend, builder, fmt
        self.tokenizer = builder.tokenizer
        stop_id = int(self.tokenizer.eos_token_id)
        if stop_id not in sampling.stop_token_ids:
            sampling = _with(sampling, stop_token_ids=tuple(sampling.stop_token_ids) + (stop_id,))
        self.sampling, self.constrained = sampling, constrained
        self.stats = stats if stats is not None else RolloutStats()
        self._action_tokens = _ActionTokens(self.tokenizer, fmt, stop_id)
        self.stop_id = stop_id
        self._bound: dict[str, ActionFormat] = {}

    def format_of(self, ep: Episode) -> ActionFormat:
        """The action format bound to ``ep`` (its reset info); memoised by the tools declared."""
        tools = ep.first_info.get("tools")
        if not tools:
            return self.fmt.bind(ep.first_info)
        key = json.dumps([tools, ep.first_info.get("tool_actions")], sort_keys=True, default=str)
        fmt = self._bound.get(key)
        if fmt is None:
            if len(self._bound) >= 256:
                self._bound.clear()
            fmt = self._bound[key] = self.fmt.bind(ep.first_info)
        return fmt

    def _prompt(self, ep: Episode) -> list[int]:
        fmt = self.format_of(ep)
        observation = ep.observation + fmt.prompt_note(ep.memory)
        role, tools = fmt.observation_role, fmt.prompt_tools
        own = ep.own_steps()  # multi-agent: this agent's steps only (its own view)
        if self.builder.cfg.context == "tokens" and own:
            last = own[-1]
            return self.builder.extend(
                last.prompt_ids,
                last.response_ids,
                observation,
                ep.admissible_actions,
                stop_id=self.stop_id,
                tools=tools,
                role=role,
            )
        return self.builder.build(
            ep.instruction,
            ep.own_history(),
            observation,
            ep.admissible_actions,
            tools=tools,
            role=role,
        )

    def start(self, episodes: Sequence[Episode]) -> None:
        for ep in episodes:
            ep.result.sampling_seed = self.sampling.seed

    def _allowed(self, episodes: Sequence[Episode]) -> tuple[list | None, list[dict]]:
        """Per episode, the token sequences it may produce (``None``: free) and their actions."""
        action_of: list[dict[tuple[int, ...], str]] = [{} for _ in episodes]
        if not self.constrained:
            return None, action_of
        allowed: list[list[tuple[int, ...]] | None] = []
        for j, ep in enumerate(episodes):
            acts = ep.admissible_actions
            fmt = self.format_of(ep)
            pairs = [
                (self._action_tokens(x), a) for a in acts or () for x in fmt.renders(a, ep.memory)
            ]
            if pairs:
                action_of[j] = dict(pairs)
                allowed.append([seq for seq, _ in pairs])
            else:  # open action space (or none the format can write): free generation
                allowed.append(None)
        return allowed, action_of

    def _step_sampling(
        self, step: int, first_request: int | None, episodes: Sequence[Episode]
    ) -> SamplingParams:
        """Step ``step``'s seed, the request numbers of a rank's share (``first_request``), and
        one session per episode (its chunk's seed and trajectory id: a multi-server engine keeps
        an episode's calls on one server)."""
        s, n = self.sampling, len(episodes)
        sessions = tuple(f"{s.seed}:{ep.result.traj}" for ep in episodes)
        if s.seed is not None:
            s = _with(s, seed=(int(s.seed) * 1_000_003 + step) & 0x7FFFFFFF)
        if first_request is not None:
            s = _with(s, request_ids=tuple(range(first_request, first_request + n)))
        return _with(s, sessions=sessions)

    def _move(
        self,
        ep: Episode,
        prompt: list[int],
        g: Generation,
        allowed: list | None,
        action_of: dict[tuple[int, ...], str],
    ) -> Move:
        # A prompt the engine could not take (longer than its context; the Generation says so
        # in extra["truncated"], see backends/vllm_engine.py) ends its episode truncated, with
        # the reason in its error, without stepping its env.
        if g.extra.get("truncated"):
            return Move("", None, cut=f"{g.extra['truncated']} ({len(prompt)} prompt tokens)")
        text = self.tokenizer.decode(g.token_ids, skip_special_tokens=True)
        action = action_of.get(tuple(g.token_ids)) if action_of else None
        fmt = self.format_of(ep)
        if action is not None:
            p_action, reason = action, ""
        else:
            p = fmt.parse(text, g.finish_reason)
            p_action, reason = p.action, p.reason
        self.stats.prompt_tokens += len(prompt)
        self.stats.response_tokens += len(g.token_ids)
        move = Move(
            text=p_action if p_action is not None else "",
            action=p_action,
            response=text,
            parse_error=reason,
            finish_reason=g.finish_reason,
            prompt_ids=list(prompt),
            response_ids=list(g.token_ids),
            logprobs=list(g.logprobs),
            allowed=allowed_per_position(allowed, g.token_ids) if allowed is not None else None,
            extras=fmt.step_extras(text),
            policy_version=int(g.extra.get("policy_version", 0)),
            token_versions=_token_versions(g),
        )
        ep.memory = fmt.remember(ep.memory, text)
        return move

    def act(self, episodes: Sequence[Episode], step: int, first_request: int | None) -> list[Move]:
        t0 = time.perf_counter()
        overflow_before = self.builder.overflows
        prompts = [self._prompt(ep) for ep in episodes]
        self.stats.prompt_overflows += self.builder.overflows - overflow_before
        allowed, action_of = self._allowed(episodes)
        t1 = time.perf_counter()
        sampling = self._step_sampling(step, first_request, episodes)
        gens = self.backend.generate(prompts, sampling, allowed)
        t2 = time.perf_counter()
        self.stats.engine_calls += 1
        moves = [
            self._move(ep, prompts[j], g, allowed[j] if allowed is not None else None, action_of[j])
            for j, (ep, g) in enumerate(zip(episodes, gens))
        ]
        self.stats.prompt_s += t1 - t0
        self.stats.generate_s += t2 - t1
        self.stats.env_s += time.perf_counter() - t2
        return moves


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
    on_episode: Callable[[int, EpisodeResult], None] | None = None,
    opponents: Any = None,
) -> list[EpisodeResult]:
    """Play ``len(resets)`` episodes on envs ``0..len(resets)-1`` of ``pool``, all at once, with
    :class:`ModelPolicy`; ``step_sync`` is :func:`~agentrl.episodes.play_episodes`'s;
    ``on_episode(k, result)`` sees episode ``k`` (its index in ``resets``) as soon as it ends.
    ``opponents`` (an :class:`~agentrl.rollout.opponents.OpponentPool`) plays the other seats of
    the games whose reset spec draws a pool opponent (``ResetSpec.opponent``)."""
    stats = stats if stats is not None else RolloutStats()
    policy: Any = ModelPolicy(backend, builder, fmt, sampling, constrained=constrained, stats=stats)
    if opponents is not None:
        policy = opponents.wrap(policy)
    return play_episodes(
        pool,
        policy,
        resets,
        max_steps=max_steps,
        traj_offset=traj_offset,
        step_sync=step_sync,
        stats=stats,
        on_finish=None
        if on_episode is None
        else (lambda ep: on_episode(ep.result.traj - traj_offset, ep.result)),
    )
