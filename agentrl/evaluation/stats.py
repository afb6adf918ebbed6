"""Confidence intervals for success rates and mean scores.

A success rate measured on ``n`` episodes is a binomial proportion. The Wilson score interval
keeps its coverage near the nominal level for small ``n`` and for rates near 0 or 1, where the
normal ("Wald") interval collapses to a point (0 % or 100 % on a handful of episodes).

A mean score (WebShop's score, Search-v0's F1) is the mean of values in [0, 1]. Such a variable
has variance at most ``mean * (1 - mean)`` (equality when every value is 0 or 1), so the Wilson
interval with the mean in place of the proportion is a conservative interval for it
(:func:`mean_interval`); it reduces to :func:`wilson_interval` on 0/1 scores.
"""

from __future__ import annotations

import math
from statistics import NormalDist

__all__ = ["mean_interval", "wilson_interval", "z_value"]


def z_value(confidence: float) -> float:
    """Two-sided standard-normal quantile for ``confidence`` (0.95 -> 1.95996...)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval ``(low, high)`` for ``successes`` out of ``n`` trials.

    ``n == 0`` carries no information and returns ``(0.0, 1.0)``. Bounds are clipped to [0, 1]
    (they only leave it by floating-point rounding).
    """
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    return mean_interval(successes / n if n else 0.0, n, confidence)


def mean_interval(mean: float, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Interval ``(low, high)`` for the mean of ``n`` values in [0, 1] whose sample mean is
    ``mean``: the Wilson interval at ``p = mean`` (conservative, see the module docstring).
    ``n == 0`` returns ``(0.0, 1.0)``; a mean of exactly 0 or 1 keeps that bound."""
    if n < 0 or not 0.0 <= mean <= 1.0:
        raise ValueError(f"need n >= 0 and 0 <= mean <= 1, got mean={mean}, n={n}")
    if n == 0:
        return 0.0, 1.0
    z = z_value(confidence)
    p = mean
    z2n = z * z / n
    center = (p + z2n / 2.0) / (1.0 + z2n)
    half = z / (1.0 + z2n) * math.sqrt(p * (1.0 - p) / n + z2n / (4.0 * n))
    low, high = max(0.0, center - half), min(1.0, center + half)
    # Exact at the edges: 0 successes -> low is 0, n successes -> high is 1.
    if p == 0.0:
        low = 0.0
    if p == 1.0:
        high = 1.0
    return low, high
