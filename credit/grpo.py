"""GRPO episode-level advantages (Shao et al., 2024, DeepSeekMath; the base of GiGPO and kin).

A_i = (R_i - mean_group R) / (std_group R + eps)   (``mode="mean_std"``), or
A_i = R_i - mean_group R                           (``mode="mean"``: Dr.GRPO, "GiGPO w/o std"),
broadcast to every step of rollout i. R_i is the undiscounted episode return (sum of ``reward``).

Statistics (``stats``):
- ``"per_trajectory"`` (default, the papers' equation): each rollout counts once.
- ``"per_step_rows"`` (verl-agent's reference code, ``compute_mean_std_cross_steps=True``): the
  mean and std run over step rows, so a T-step rollout contributes T copies of R_i and long
  episodes weigh more.

Defaults: unbiased std (ddof=1, as ``torch.std``), eps = 1e-6. A group of a single member gets
mean 0 and std 1 (``singleton="raw"``, the reference code's convention) or 0 (``"zero"``).

``invalid_penalty`` c (default 0 here, the paper; verl-agent's recipes use 0.1): the row's score
is ``R_i - c * [action invalid]``, as verl-agent subtracts c from the step's token-level score.
With ``per_step_rows`` the statistics run over these row scores (exactly the reference); with
``per_trajectory`` they run over the rollouts' R_i and each row's score is then normalised with
them (the reference has no per-trajectory variant with a penalty).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from .batch import StepBatch
from .diagnostics import episode_diagnostics
from .ops import EPS, Mode, check_choice, normalize, segment_mean, segment_std
from .registry import CreditResult, register

Stats = Literal["per_trajectory", "per_step_rows"]
STATS = ("per_trajectory", "per_step_rows")


def row_scores(
    batch: StepBatch, invalid_penalty: float = 0.0, returns: np.ndarray | None = None
) -> np.ndarray:
    """Per row, its rollout's episode return minus ``invalid_penalty`` if the row's action was invalid."""
    R = batch.episode_return if returns is None else returns
    score = R[batch.traj_index]
    if invalid_penalty:
        score = score - invalid_penalty * (~batch.valid)
    return score


def episode_advantages(
    batch: StepBatch,
    mode: Mode = "mean_std",
    stats: Stats = "per_trajectory",
    eps: float = EPS,
    singleton: Literal["raw", "zero"] = "raw",
    returns: np.ndarray | None = None,
    invalid_penalty: float = 0.0,
) -> np.ndarray:
    """Per row, the group-normalised episode return of its rollout (float64).

    ``returns`` overrides the per-trajectory returns (indexed by trajectory code).
    """
    check_choice("stats", stats, STATS)
    check_choice("mode", mode, ("mean", "mean_std"))
    check_choice("singleton", singleton, ("raw", "zero"))
    R = batch.episode_return if returns is None else np.asarray(returns, dtype=np.float64)
    score = row_scores(batch, invalid_penalty, R)
    if stats == "per_step_rows":
        return normalize(
            score, batch.group_index, batch.num_groups, mode, eps=eps, singleton=singleton
        )
    # per_trajectory: statistics over the rollouts of each group, one value each.
    g, ng = batch.traj_group, batch.num_groups
    if not invalid_penalty:
        adv = normalize(R, g, ng, mode, eps=eps, singleton=singleton)
        return adv[batch.traj_index]
    mean, counts = segment_mean(R, g, ng)
    dev = score - mean[batch.group_index]
    if mode == "mean_std":
        dev = dev / (segment_std(R, g, ng)[batch.group_index] + eps)
    single = counts[batch.group_index] == 1
    raw = score / (1.0 + eps) if mode == "mean_std" else score
    return np.where(single, raw if singleton == "raw" else 0.0, dev)


@register("grpo", groups=True)
def grpo(
    batch: StepBatch,
    *,
    mode: Mode = "mean_std",
    stats: Stats = "per_trajectory",
    eps: float = EPS,
    singleton: Literal["raw", "zero"] = "raw",
    invalid_penalty: float = 0.0,
) -> CreditResult:
    """GRPO: the group-normalised episode return on every step of the rollout."""
    adv = episode_advantages(batch, mode, stats, eps, singleton, invalid_penalty=invalid_penalty)
    diag = episode_diagnostics(batch)
    return CreditResult(adv, diag, {"episode": adv})


__all__ = ["STATS", "Stats", "episode_advantages", "grpo", "row_scores"]
