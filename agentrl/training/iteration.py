"""The pieces of a training iteration that the recipe (:mod:`agentrl.recipe`) calls by name:
which tasks an iteration plays, the credit module's options and declared inputs, and the metrics
row it logs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import credit
from .. import distributed as D
from ..config import TrainConfig
from ..evaluation.games import opponent_of
from ..evaluation.tasks import eval_resets, make_tasks
from ..learner import Learner
from ..rollout import EpisodeResult, EpisodeRunner, ResetSpec, RolloutStats, chunk_seed
from ..rollout.opponents import draw_opponents
from .data_parallel import local_share, lockstep, play_as_one_process
from .dynamic_sampling import sample_informative
from .summary import peak_cuda_mb, peak_rss_mb

__all__ = [
    "credit_options",
    "features",
    "filter_groups",
    "held_out_resets",
    "play_iteration",
    "train_resets",
    "train_row",
]


def credit_options(cfg: TrainConfig) -> dict[str, Any]:
    """The credit module's options; ``invalid_penalty: null`` takes the env's penalty."""
    opts = dict(cfg.credit.options)
    if "invalid_penalty" in credit.options(cfg.credit.name) and opts.get("invalid_penalty") is None:
        # The env config gives the penalty as a reward (<= 0); credit modules subtract a magnitude.
        opts["invalid_penalty"] = -float(cfg.env.invalid_penalty)
    elif "invalid_penalty" in opts and opts["invalid_penalty"] is None:
        opts.pop("invalid_penalty")
    return opts


def train_resets(
    cfg: TrainConfig,
    it: int,
    train_ids: list[str] | None,
    n_groups: int | None = None,
    draw: int = 0,
    first_group: int = 0,
    salt: tuple[int, ...] = (),
) -> list[ResetSpec]:
    """Iteration ``it``'s tasks: ``tasks_per_iter`` groups of ``group_size`` identical resets,
    drawn from ``(seed, it)`` alone (a resumed run draws the same tasks), and with
    ``rollout.opponents`` each game's opponent (:func:`~agentrl.rollout.opponents.draw_opponents`). Dynamic sampling's
    extra draws (``draw`` >= 1) take ``n_groups`` more from ``(seed, it, draw, *salt)``, numbered
    from group ``first_group`` of the iteration (``salt``: a rank drawing its own extras)."""
    r, e = cfg.rollout, cfg.env
    rng = np.random.default_rng([cfg.seed, it, 1] + ([draw, *salt] if draw else []))
    resets = []
    for g in range(first_group, first_group + (n_groups or r.tasks_per_iter)):
        group = it * r.tasks_per_iter + g
        if train_ids is None:
            spec = ResetSpec(group, seed=int(rng.integers(0, e.train_seed_high)))
        else:
            tid = train_ids[int(rng.integers(len(train_ids)))]
            spec = ResetSpec(group, seed=None, options={"task_id": tid})
        resets += [spec] * r.group_size
    if r.opponents:  # who plays the other seats, per game (docs/envs/multi-agent.md)
        resets = draw_opponents(resets, r.opponents, cfg.seed, it, upto=it - r.staleness)
    return resets


def play_iteration(
    cfg: TrainConfig,
    it: int,
    train_ids: list[str] | None,
    runner: EpisodeRunner,
    stats: RolloutStats,
) -> tuple[list[EpisodeResult], dict[str, float]]:
    """Iteration ``it``'s training episodes and the rollout metrics to log.

    With ``rollout.dynamic_sampling`` (:func:`agentrl.training.dynamic_sampling.sample_informative`),
    groups whose rollouts all got the same return are dropped and new groups drawn within
    ``rollout.max_extra_rollouts``. The return is the env reward plus ``env.invalid_penalty`` per
    invalid step (what the credit modules see). The first draw is exactly the iteration's usual
    tasks and sampling seed; draw ``k`` samples with ``chunk_seed(seed, it, 2, k)``.
    """
    r = cfg.rollout
    if not r.dynamic_sampling:
        # torchrun: this rank's groups, stepped in lockstep with the other ranks so every episode
        # samples as in one process (agentrl.training.data_parallel); one process: all groups
        resets, first = local_share(train_resets(cfg, it, train_ids), r.group_size)
        seed = chunk_seed(cfg.seed, it, 2)
        return runner.play(resets, temperature=r.temperature, seed=seed, traj_offset=first,
                           stats=stats, step_sync=lockstep()), {}  # fmt: skip
    played = {"draws": 0, "groups": 0, "episodes": 0}

    def draw(k: int) -> list[list[EpisodeResult]]:
        d = played["draws"]
        resets = train_resets(cfg, it, train_ids, k, draw=d, first_group=played["groups"])
        seed = chunk_seed(cfg.seed, it, 2, *([d] if d else []))
        # torchrun: every rank gets all the draw's episodes, so all choose the same groups
        eps = play_as_one_process(runner, resets, temperature=r.temperature, seed=seed,
                                  traj_offset=played["episodes"], stats=stats, whole=True)  # fmt: skip
        played["draws"], played["groups"] = d + 1, played["groups"] + k
        played["episodes"] += len(eps)
        return [eps[i : i + r.group_size] for i in range(0, len(eps), r.group_size)]

    budget = r.max_extra_rollouts
    budget = r.tasks_per_iter * r.group_size if budget is None else budget
    groups, metrics = filter_groups(cfg, r.tasks_per_iter, budget, draw)
    if D.is_distributed():  # every rank holds every kept group: keep this rank's block
        block = D.shard_groups(len(groups))
        groups = groups[block.start : block.stop]
    return [ep for group in groups for ep in group], metrics


def filter_groups(
    cfg: TrainConfig,
    n_groups: int,
    budget: int,
    draw: Callable[[int], list[list[EpisodeResult]]],
) -> tuple[list[list[EpisodeResult]], dict[str, float]]:
    """Dynamic sampling's groups and ``rollout/dynamic_sampling/*`` metrics: ``draw(n)`` plays
    ``n`` more task groups; groups whose returns (env reward plus ``env.invalid_penalty`` per
    invalid step, what the credit modules see) are all equal are dropped and replaced within
    ``budget`` extra rollouts, then padded or kept short as ``rollout.when_short`` says. The
    synchronous loop and the asynchronous producer both filter through here."""
    r = cfg.rollout
    penalty = float(cfg.env.invalid_penalty)
    drawn = [0]

    def counted(n: int) -> list[list[EpisodeResult]]:
        groups = draw(n)
        drawn[0] += sum(len(g) for g in groups)
        return groups

    result = sample_informative(
        counted,
        lambda group: [_return_with_penalty(ep, penalty) for ep in group],
        n_groups,
        group_size=r.group_size,
        max_extra_rollouts=budget,
        when_short=r.when_short,
    )
    metrics = {f"rollout/{k}": float(v) for k, v in result.metrics.items()}
    metrics["rollout/dynamic_sampling/drawn_rollouts"] = float(drawn[0])
    return result.groups, metrics


def _return_with_penalty(ep: EpisodeResult, penalty: float) -> float:
    """An episode's return as credit sees it (plus the penalty per invalid step); a multi-agent
    episode's is its first seat's (in two-player zero-sum and team games the other's moves with
    it), since its total over agents is 0 in zero-sum games and would never differ."""
    if ep.seats and ep.agent_return:
        a = ep.seats[0]
        invalid = sum(not s.valid for s in ep.steps if s.agent == a)
        return ep.agent_return.get(a, 0.0) + penalty * invalid
    return ep.total_reward + penalty * ep.invalid_actions


def held_out_resets(cfg: TrainConfig, pool: Any) -> list[ResetSpec]:
    """The fixed held-out tasks, built exactly as ``agentrl.evaluate`` builds them
    (:func:`agentrl.evaluation.tasks.make_tasks`; the split is listed by an env of the pool)."""
    e = cfg.env
    tasks = make_tasks(
        e.id,
        e.kwargs,
        split=e.eval_split,
        episodes=e.eval_episodes,
        seed_base=e.eval_seed_base,
        seed=cfg.seed,
        list_task_ids=lambda split, n: pool.call([0], "task_ids", split, n)[0],
    )
    return eval_resets(tasks)


def features(
    learner: Learner, model: Any, eps: list[EpisodeResult], needs: frozenset[str], layer: int
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Critic values and hidden-state embeddings at each step's last prompt token, computed only
    when ``needs`` names them (``value``, ``embedding``: what the credit module reads and no step
    hook supplies, :attr:`agentrl.methods.TrainerHooks.prompt_features`)."""
    if not needs & {"value", "embedding"}:
        return None, None
    depth = _num_hidden_states(model)
    layer = max(layer, -depth + 1) if layer < 0 else min(layer, depth - 1)
    prompts = [s.prompt_ids for ep in eps for s in ep.steps]
    values, embs = learner.prompt_features(prompts, layer if "embedding" in needs else None)
    return values, embs


def _num_hidden_states(model: Any) -> int:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return int(base.config.num_hidden_layers) + 1


def train_row(
    it, eps, seqs, stats: RolloutStats, res, upd, t_roll, t_credit, t_upd, extra=None
) -> dict:
    """The ``metrics.jsonl`` row of training iteration ``it`` (``extra``: more metrics)."""
    won = np.array([ep.won for ep in eps], dtype=float)
    steps = [s for ep in eps for s in ep.steps if s.agent not in ep.frozen]  # the learner's
    row: dict[str, Any] = {
        "iteration": it + 1,
        "step": it + 1,
        "phase": "train",
        "train/success_rate": float(won.mean()),
        "train/mean_return": float(np.mean([ep.total_reward for ep in eps])),
        "train/mean_score": float(np.mean([ep.score for ep in eps])),
        "train/mean_steps": float(np.mean([len(ep.steps) for ep in eps])),
        "train/invalid_action_rate": float(np.mean([not s.valid for s in steps])),
        "train/truncated_response_rate": float(
            np.mean([s.finish_reason == "length" for s in steps])
        ),
        "train/agent_steps": len(seqs),
        "train/prompt_tokens": stats.prompt_tokens,
        "train/response_tokens": stats.response_tokens,
        "train/prompt_overflows": stats.prompt_overflows,
        "train/advantage_abs_mean": float(np.abs(res.advantages).mean()),
        "time/rollout_s": t_roll.wall,
        "time/credit_s": t_credit.wall,
        "time/update_s": t_upd.wall,
        "time/iteration_s": t_roll.wall + t_credit.wall + t_upd.wall,
        "cpu/rollout_s": t_roll.cpu,
        "cpu/credit_s": t_credit.cpu,
        "cpu/update_s": t_upd.cpu,
        "time/generate_s": stats.generate_s,
        "time/env_s": stats.env_s,
        "mem/peak_rss_mb": peak_rss_mb(),
    }
    row.update({k: float(v) for k, v in stats.counters.items()})  # a rollout source's own counts
    row.update(opponent_counts(eps))
    cuda_mb = peak_cuda_mb()
    if cuda_mb is not None:
        row["mem/peak_cuda_mb"] = cuda_mb
    row.update(extra or {})
    # the learner's metrics under loss/, except the engine-learner mismatch's (offpolicy/*)
    row.update({k if k.startswith("offpolicy/") else f"loss/{k}": v for k, v in upd.items()})
    for k, v in res.diagnostics.items():
        if isinstance(v, int | float) and not isinstance(v, bool):
            row[f"credit/{k}"] = float(v)
    return row


def opponent_counts(eps: list[EpisodeResult]) -> dict[str, float]:
    """Multi-agent games per opponent, ``opponents/<name>_games`` (``self``, ``pool``, a bot
    spec), read from the task ids (``pool:3@1#7`` -> ``pool``); nothing for single-agent envs."""
    counts: dict[str, float] = {}
    for ep in eps:
        if not ep.agent_return:
            continue
        name = "pool" if ep.task_id.startswith("pool:") else opponent_of(ep.task_id)
        key = f"opponents/{name}_games"
        counts[key] = counts.get(key, 0.0) + 1.0
    return counts
