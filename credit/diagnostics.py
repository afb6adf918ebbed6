"""Diagnostics every credit module reports: how its groups look and where its signal comes from.

- ``<name>_group_sizes``: histogram ``{size: number of groups}`` of the groups a module normalises
  within (episode groups count rollouts; step groups count steps).
- ``<name>_singleton_fraction``: fraction of rows alone in their group (no baseline: no signal).
- ``all_fail_group_fraction``: fraction of task groups where no rollout succeeded (needs the
  ``success`` column).
- ``<name>_all_fail_var``: mean within-group (population) variance of the module's dense signal
  over the groups of size >= 2 that lie in all-fail task groups. Under z-scoring, this variance is
  what gets amplified to unit scale when nothing succeeds (the "dark room" failure), so it is the
  number to watch when a dense signal is switched on.
- ``zero_advantage_fraction`` (added by :func:`agentrl.credit.compute`): fraction of rows with advantage 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .batch import StepBatch
from .ops import deviations

__all__ = ["episode_diagnostics", "group_diagnostics", "size_histogram"]


def size_histogram(codes: np.ndarray, n: int) -> dict[int, int]:
    """``{size: count}`` over the non-empty segments of ``codes``."""
    counts = np.bincount(codes[codes >= 0], minlength=n)
    sizes, freq = np.unique(counts[counts > 0], return_counts=True)
    return {int(s): int(f) for s, f in zip(sizes, freq, strict=True)}


def all_fail_rows(batch: StepBatch) -> np.ndarray | None:
    """Per row, whether its task group has no successful rollout (``None`` without ``success``)."""
    succ = batch.traj_success
    if succ is None:
        return None
    any_win = (
        np.bincount(batch.traj_group, weights=succ.astype(np.float64), minlength=batch.num_groups)
        > 0
    )
    return ~any_win[batch.group_index]


def group_diagnostics(
    batch: StepBatch,
    name: str,
    codes: np.ndarray,
    n: int,
    signal: np.ndarray | None = None,
) -> dict[str, Any]:
    """Size histogram, singleton fraction and all-fail signal variance of one step-level grouping.

    ``codes`` gives each row's group (``-1``: the row is in no group, e.g. too early for a history
    key); ``signal`` is the dense per-row quantity normalised within those groups.
    """
    inside = codes >= 0
    counts = np.bincount(codes[inside], minlength=n)
    member_size = np.zeros(len(codes), dtype=np.int64)
    member_size[inside] = counts[codes[inside]]
    out: dict[str, Any] = {
        f"{name}_group_sizes": size_histogram(codes, n),
        f"{name}_singleton_fraction": float(np.mean(member_size == 1)),
        f"{name}_mean_group_size": float(np.mean(counts[counts > 0]))
        if (counts > 0).any()
        else 0.0,
    }
    fail = all_fail_rows(batch)
    if signal is not None and fail is not None:
        sel = inside & fail & (member_size >= 2)
        if sel.any():
            dev, cnt = deviations(signal[sel], codes[sel], n)
            with np.errstate(over="ignore"):  # a variance beyond float64 is reported as inf
                sq = dev * dev
            var = np.bincount(codes[sel], weights=sq, minlength=n)[cnt > 0] / cnt[cnt > 0]
            out[f"{name}_all_fail_var"] = float(np.mean(var))
        else:
            out[f"{name}_all_fail_var"] = 0.0
    return out


def episode_diagnostics(batch: StepBatch, returns: np.ndarray | None = None) -> dict[str, Any]:
    """Diagnostics of the episode-level groups: rollouts per group, all-equal and all-fail shares."""
    R = batch.episode_return if returns is None else returns
    g = batch.traj_group
    lo = np.full(batch.num_groups, np.inf)
    hi = np.full(batch.num_groups, -np.inf)
    np.minimum.at(lo, g, R)
    np.maximum.at(hi, g, R)
    out: dict[str, Any] = {
        "episode_group_sizes": size_histogram(g, batch.num_groups),
        "episode_singleton_fraction": float(
            np.mean(np.bincount(g, minlength=batch.num_groups)[g] == 1)
        ),
        "episode_groups_all_equal": float(np.mean(lo == hi)),
    }
    succ = batch.traj_success
    if succ is not None:
        wins = np.bincount(g, weights=succ.astype(np.float64), minlength=batch.num_groups)
        out["all_fail_group_fraction"] = float(np.mean(wins == 0))
        fail_traj = (wins == 0)[g]
        if fail_traj.any():
            dev, cnt = deviations(R[fail_traj], g[fail_traj], batch.num_groups)
            with np.errstate(over="ignore"):  # a variance beyond float64 is reported as inf
                sq = dev * dev
            var = np.bincount(g[fail_traj], weights=sq, minlength=batch.num_groups)
            keep = cnt >= 2
            out["episode_all_fail_var"] = (
                float(np.mean(var[keep] / cnt[keep])) if keep.any() else 0.0
            )
        else:
            out["episode_all_fail_var"] = 0.0
    return out
