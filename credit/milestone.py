"""BEACON milestone credit: segment shaping and dual-scale advantages (ICML 2026; code: ZJU-REAL/BEACON).

Milestones (verifiable sub-goal completions reported by the env in ``info["milestones"]``; the
step batch's ``milestone`` column counts those newly reached at each step) cut every rollout into
segments. Segment k of a rollout holds the steps taken after its k-th milestone up to and including
the step that reaches the next one.

- Shaped step reward: a step in a segment that closes at milestone step t_k gets
  r_t = R_ms * gamma^(t_k - t) (R_ms = ``reward_scale`` = 10); steps after the rollout's last
  milestone get 0.
- Segment groups: the steps of one task group with the same segment index, pooled across
  rollouts (the "dual scale": local progress is compared with the other rollouts' attempts at the
  same sub-goal, so a distant failure does not corrupt it).
- A_{i,t} = base_{i,t} + weight * normalise_segment(r_t), with ``mean`` (default) or ``mean_std``
  (unbiased std) normalisation; a segment group of one step gets 0.

The base is BEACON's own episode term (GiGPO's: GRPO over step rows, same ``mode``) unless
``base`` names another module spec (e.g. ``{"name": "rloo"}``); ``compose`` stacks the step part
(``components["step"]``) on anything else.

Defaults: gamma 0.95 and weight 1 (paper, WebShop/SciWorld scripts), reward_scale 10, mode ``mean``
(the reference default, and the safe one: under z-scoring a dense signal in all-fail groups is
amplified to unit scale whatever its size, the "dark room" failure; watch ``segment_all_fail_var``),
invalid_penalty 0.1 (subtracted from the shaped reward and the episode score of invalid steps,
as the reference's trainer does).

Differences from the reference: the segment index counts milestones, not milestone steps (equal
unless one step reaches two milestones at once, which then moves the rollout two segments on, in
line with the other rollouts that reached them one by one); milestones come from the env's own
detector through the ``milestone`` column instead of fuzzy-matching actions against expert plans
(the reference's ALFWorld path, which silently falls back to the episode term when its inputs
are missing; here a missing column is an error).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .batch import StepBatch
from .checks import UNIT, check_value
from .compose import run_spec, spec_group_based
from .diagnostics import episode_diagnostics, group_diagnostics
from .grpo import Stats, episode_advantages
from .ops import EPS, Mode, check_choice, combine_codes, normalize
from .registry import CreditResult, register

__all__ = ["milestone", "milestone_segments"]

HOW = (
    "build the StepBatch with milestone=<count of milestones newly reached at each step> "
    "(the trainer derives it from the env's info['milestones'])"
)


def milestone_segments(
    batch: StepBatch, gamma: float, reward_scale: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, (segment index, shaped reward) from the ``milestone`` column."""
    check_value("gamma", gamma, UNIT)
    ms = batch.require("milestone", HOW).astype(np.float64)
    seg = (batch.forward_cumsum(ms) - ms).astype(np.int64)  # milestones reached before this step
    # t of the first milestone step at or after t (inf when none): reversed running minimum.
    mat = batch.step_matrix
    mask = mat >= 0
    t_ms = np.where(ms > 0, batch.t.astype(np.float64), np.inf)
    padded = np.where(mask, t_ms[np.where(mask, mat, 0)], np.inf)
    nxt = np.minimum.accumulate(padded[:, ::-1], axis=1)[:, ::-1]
    next_ms = np.empty(len(batch))
    next_ms[mat[mask]] = nxt[mask]
    has = np.isfinite(next_ms)
    dist = np.where(has, next_ms - batch.t, 0.0)
    shaped = np.where(has, reward_scale * np.power(gamma, dist), 0.0)
    return seg, shaped


@register(  # segment groups pool a task group's rollouts; a base must need groups too
    "milestone", groups=lambda o: o["base"] is None or spec_group_based(o["base"], "base")
)
def milestone(
    batch: StepBatch,
    *,
    gamma: float = 0.95,
    weight: float = 1.0,
    reward_scale: float = 10.0,
    mode: Mode = "mean",
    base: Any = None,
    episode_stats: Stats = "per_step_rows",
    invalid_penalty: float = 0.1,
    eps: float = EPS,
) -> CreditResult:
    """BEACON: episode base plus the segment-normalised milestone-shaped reward."""
    check_choice("mode", mode, ("mean", "mean_std"))
    seg, shaped = milestone_segments(batch, gamma, reward_scale)
    if invalid_penalty:
        shaped = shaped - invalid_penalty * (~batch.valid)
    codes, n = combine_codes((batch.group_index, batch.num_groups), (seg, int(seg.max()) + 1))
    A_S = normalize(shaped, codes, n, mode, ddof=1, eps=eps, singleton="zero")
    diag = episode_diagnostics(batch)
    if base is None:
        A_E = episode_advantages(
            batch, mode, episode_stats, eps, "raw", invalid_penalty=invalid_penalty
        )
    else:
        res = run_spec(batch, base, "option 'base'")
        A_E = np.asarray(res.advantages, dtype=np.float64)
        diag.update({f"base/{k}": v for k, v in res.diagnostics.items()})
    diag.update(group_diagnostics(batch, "segment", codes, n, shaped))
    ms = batch.milestone
    per_traj = np.bincount(
        batch.traj_index, weights=ms.astype(np.float64), minlength=batch.num_trajectories
    )
    diag["milestones_per_trajectory"] = float(per_traj.mean())
    diag["trajectories_with_milestone"] = float(np.mean(per_traj > 0))
    return CreditResult(
        A_E + weight * A_S, diag, {"episode": A_E, "step": A_S, "shaped_reward": shaped}
    )
