"""RLOO episode-level advantages (Ahmadian et al., 2024; Kool et al., 2019).

A_i = R_i - mean_{j != i} R_j = n/(n-1) (R_i - mean_group R), broadcast to every step of rollout i.

``stats="per_trajectory"`` (default, the paper): the n rollouts of the group.
``stats="per_step_rows"``: over step rows, as verl-agent applies verl's RLOO to its step rows
(n is then the number of step rows of the group).
A group of one member has no other sample: it gets R_i (``singleton="raw"``, verl's convention)
or 0 (``"zero"``). ``invalid_penalty`` as in :mod:`agentrl.credit.grpo` (default 0).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from .batch import StepBatch
from .diagnostics import episode_diagnostics
from .grpo import STATS, Stats, row_scores
from .ops import check_choice, segment_mean
from .registry import CreditResult, register


def leave_one_out(
    score: np.ndarray,
    codes: np.ndarray,
    values: np.ndarray,
    value_codes: np.ndarray,
    n: int,
    singleton: str,
) -> np.ndarray:
    """n/(n-1) * (score - mean(values)) per segment, with n the segment's number of values."""
    mean, counts = segment_mean(values, value_codes, n)
    c = counts[codes].astype(np.float64)
    loo = np.where(c > 1, c / np.maximum(c - 1, 1) * (score - mean[codes]), 0.0)
    if singleton == "raw":
        loo = np.where(c == 1, score, loo)
    return loo


def rloo_advantages(
    batch: StepBatch,
    stats: Stats = "per_trajectory",
    singleton: Literal["raw", "zero"] = "raw",
    invalid_penalty: float = 0.0,
) -> np.ndarray:
    check_choice("stats", stats, STATS)
    check_choice("singleton", singleton, ("raw", "zero"))
    score = row_scores(batch, invalid_penalty)
    if stats == "per_trajectory":
        return leave_one_out(
            score,
            batch.group_index,
            batch.episode_return,
            batch.traj_group,
            batch.num_groups,
            singleton,
        )
    return leave_one_out(
        score, batch.group_index, score, batch.group_index, batch.num_groups, singleton
    )


@register("rloo", groups=True)
def rloo(
    batch: StepBatch,
    *,
    stats: Stats = "per_trajectory",
    singleton: Literal["raw", "zero"] = "raw",
    invalid_penalty: float = 0.0,
) -> CreditResult:
    """RLOO: each rollout's return minus the mean return of the other rollouts of its group."""
    adv = rloo_advantages(batch, stats, singleton, invalid_penalty)
    return CreditResult(adv, episode_diagnostics(batch), {"episode": adv})
