"""Agreement between estimated and true advantages, and bootstrap intervals (numpy only)."""

from __future__ import annotations

import numpy as np

__all__ = ["ZERO_TOL", "agreement", "bootstrap_ci", "pearson", "rankdata", "spearman"]

#: An advantage with |A| <= ZERO_TOL counts as zero (float32 round-off of "no signal").
ZERO_TOL = 1e-6


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation; NaN when either side is constant (no linear information)."""
    x = np.asarray(x, dtype=np.float64) - np.mean(x)
    y = np.asarray(y, dtype=np.float64) - np.mean(y)
    den = np.sqrt(np.dot(x, x) * np.dot(y, y))
    return float(np.dot(x, y) / den) if den > 0 else float("nan")


def rankdata(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties sharing their average rank (as ``scipy.stats.rankdata``)."""
    x = np.asarray(x)
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    new = np.r_[True, xs[1:] != xs[:-1]]
    starts = np.flatnonzero(new)
    ends = np.r_[starts[1:], len(x)]
    avg = (starts + ends - 1) / 2.0 + 1.0
    ranks = np.empty(len(x))
    ranks[order] = avg[np.cumsum(new) - 1]
    return ranks


def spearman(x: np.ndarray, y: np.ndarray, decimals: int = 6) -> float:
    """Spearman rank correlation; values are rounded to ``decimals`` first so that float
    round-off does not break ties between equal advantages."""
    return pearson(rankdata(np.round(x, decimals)), rankdata(np.round(y, decimals)))


def agreement(estimate: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """Pearson, Spearman, sign agreement and the fraction of zero estimates.

    Sign agreement is over the steps whose true advantage is non-zero; an estimate of zero
    there counts as a disagreement (it gives no direction).
    """
    est = np.asarray(estimate, dtype=np.float64)
    tru = np.asarray(truth, dtype=np.float64)
    est_sign = np.where(np.abs(est) <= ZERO_TOL, 0, np.sign(est))
    nz = np.abs(tru) > 1e-9
    return {
        "pearson": pearson(est, tru),
        "spearman": spearman(est, tru),
        "sign": float(np.mean(est_sign[nz] == np.sign(tru[nz]))) if nz.any() else float("nan"),
        "zero": float(np.mean(est_sign == 0)),
    }


def bootstrap_ci(
    values: np.ndarray, rng: np.random.Generator, n_boot: int = 2000, level: float = 0.95
) -> tuple[float, float, float]:
    """(mean, low, high): percentile bootstrap interval of the mean over seeds (NaNs dropped)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return float("nan"), float("nan"), float("nan")
    if len(v) == 1:
        return float(v[0]), float(v[0]), float(v[0])
    means = v[rng.integers(0, len(v), size=(n_boot, len(v)))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(v.mean()), float(lo), float(hi)
