"""RLOO episode-level advantages (Ahmadian et al., 2024; Kool et al., 2019).

A_i = R_i - mean_{j != i} R_j = n/(n-1) (R_i - mean_group R), broadcast to every step of rollout i.

``stats="per_trajectory"`` (default, the paper): the n rollouts of the group.
``stats="per_step_rows"``: over step rows, as verl-agent applies verl's RLOO to its step rows.
A group of one member has no other sample: it gets R_i (``singleton="raw"``, verl's convention)
or 0 (``"zero"``).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from .batch import StepBatch
from .grpo import Stats, group_diagnostics
from .ops import segment_mean
from .registry import CreditResult, register


def _leave_one_out(values: np.ndarray, codes: np.ndarray, n: int, singleton: str) -> np.ndarray:
    mean, counts = segment_mean(values, codes, n)
    c = counts[codes].astype(np.float64)
    loo = np.where(c > 1, c / np.maximum(c - 1, 1) * (values - mean[codes]), 0.0)
    if singleton == "raw":
        loo = np.where(c == 1, values, loo)
    return loo


@register("rloo")
def rloo(
    batch: StepBatch,
    *,
    stats: Stats = "per_trajectory",
    singleton: Literal["raw", "zero"] = "raw",
) -> CreditResult:
    """RLOO: each rollout's return minus the mean return of the other rollouts of its group."""
    R = batch.episode_return
    if stats == "per_trajectory":
        adv = _leave_one_out(R, batch.traj_group, batch.num_groups, singleton)[batch.traj_index]
    elif stats == "per_step_rows":
        adv = _leave_one_out(R[batch.traj_index], batch.group_index, batch.num_groups, singleton)
    else:
        raise ValueError(f"stats must be 'per_trajectory' or 'per_step_rows', got {stats!r}")
    return CreditResult(adv, group_diagnostics(batch))
