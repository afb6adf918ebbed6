"""GRPO episode-level advantages (Shao et al., 2024, DeepSeekMath; the base of GiGPO and kin).

A_i = (R_i - mean_group R) / (std_group R + eps)   (``mode="mean_std"``), or
A_i = R_i - mean_group R                           (``mode="mean"``: Dr.GRPO, "GiGPO w/o std"),
broadcast to every step of rollout i. R_i is the undiscounted episode return.

Statistics (``stats``):
- ``"per_trajectory"`` (default, the papers' equation): each rollout counts once.
- ``"per_step_rows"`` (verl-agent's reference code): the mean and std run over step rows, so a
  T-step rollout contributes T copies of R_i and long episodes weigh more.

Defaults: unbiased std (ddof=1, as ``torch.std``), eps = 1e-6. A group of a single member gets
mean 0 and std 1 (``singleton="raw"``, the reference code's convention) or 0 (``"zero"``).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from .batch import StepBatch
from .ops import EPS, Mode, normalize
from .registry import CreditResult, register

Stats = Literal["per_trajectory", "per_step_rows"]


def episode_advantages(
    batch: StepBatch,
    mode: Mode = "mean_std",
    stats: Stats = "per_trajectory",
    eps: float = EPS,
    singleton: Literal["raw", "zero"] = "raw",
    returns: np.ndarray | None = None,
) -> np.ndarray:
    """Per row, the group-normalised episode return of its rollout (float64).

    ``returns`` overrides the per-trajectory returns (indexed by trajectory code).
    """
    R = batch.episode_return if returns is None else returns
    if stats == "per_trajectory":
        adv = normalize(R, batch.traj_group, batch.num_groups, mode, eps=eps, singleton=singleton)
        return adv[batch.traj_index]
    if stats == "per_step_rows":
        return normalize(R[batch.traj_index], batch.group_index, batch.num_groups, mode, eps=eps, singleton=singleton)
    raise ValueError(f"stats must be 'per_trajectory' or 'per_step_rows', got {stats!r}")


def group_diagnostics(batch: StepBatch) -> dict:
    sizes = np.bincount(batch.traj_group, minlength=batch.num_groups)
    R = batch.episode_return
    lo = np.full(batch.num_groups, np.inf)
    hi = np.full(batch.num_groups, -np.inf)
    np.minimum.at(lo, batch.traj_group, R)
    np.maximum.at(hi, batch.traj_group, R)
    return {
        "episode_group_sizes": {int(k): int(v) for k, v in zip(*np.unique(sizes, return_counts=True))},
        "episode_groups_all_equal": float(np.mean(lo == hi)),
    }


@register("grpo")
def grpo(
    batch: StepBatch,
    *,
    mode: Mode = "mean_std",
    stats: Stats = "per_trajectory",
    eps: float = EPS,
    singleton: Literal["raw", "zero"] = "raw",
) -> CreditResult:
    """GRPO: the group-normalised episode return on every step of the rollout."""
    adv = episode_advantages(batch, mode, stats, eps, singleton)
    return CreditResult(adv, group_diagnostics(batch))
