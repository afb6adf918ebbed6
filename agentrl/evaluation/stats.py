"""Confidence intervals for success rates.

A success rate measured on ``n`` episodes is a binomial proportion. The Wilson score interval
keeps its coverage near the nominal level for small ``n`` and for rates near 0 or 1, where the
normal ("Wald") interval collapses to a point (0 % or 100 % on a handful of episodes).
"""

from __future__ import annotations

import math
from statistics import NormalDist

__all__ = ["wilson_interval", "z_value"]


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
    if n == 0:
        return 0.0, 1.0
    z = z_value(confidence)
    p = successes / n
    z2n = z * z / n
    center = (p + z2n / 2.0) / (1.0 + z2n)
    half = z / (1.0 + z2n) * math.sqrt(p * (1.0 - p) / n + z2n / (4.0 * n))
    low, high = max(0.0, center - half), min(1.0, center + half)
    # Exact at the edges: 0 successes -> low is 0, n successes -> high is 1.
    if successes == 0:
        low = 0.0
    if successes == n:
        high = 1.0
    return low, high
