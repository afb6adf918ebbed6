"""Vectorised segment statistics shared by credit modules.

A *segment* is any grouping of rows given as integer codes ``0..n-1`` (an episode group, an
anchor-state group, a (group, turn) cell...). Everything here is one pass of ``np.bincount`` /
``ufunc.at`` over the rows, so cost is linear in the number of rows and independent of row order
up to floating-point rounding.

Means are taken relative to each segment's largest value, so a segment whose values are all equal gets
deviations of exactly 0 (not 1e-17 noise that z-scoring would blow up), and huge common offsets
do not cancel catastrophically.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from .checks import Choice, check_value

Mode = Literal["mean", "mean_std"]
Singleton = Literal["zero", "raw"]
EPS = 1e-6
MODES = ("mean", "mean_std")

__all__ = [
    "EPS",
    "MODES",
    "Mode",
    "check_choice",
    "combine_codes",
    "densify",
    "deviations",
    "normalize",
    "segment_max",
    "segment_mean",
    "segment_std",
    "segment_sum",
    "std_from_deviations",
]


def check_choice(name: str, value: object, choices: tuple) -> None:
    """Raise ``ValueError`` naming the option and its valid values when ``value`` is not one."""
    check_value(name, value, Choice(tuple(choices)))


def segment_sum(values: np.ndarray, codes: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(codes, weights=values, minlength=n)


def segment_max(values: np.ndarray, codes: np.ndarray, n: int) -> np.ndarray:
    """Per segment, the maximum (``-inf`` for empty segments)."""
    out = np.full(n, -np.inf)
    np.maximum.at(out, codes, values)
    return out


def _reference(values: np.ndarray, codes: np.ndarray, n: int) -> np.ndarray:
    """Per segment, its largest value (0 for empty segments): an order-independent member value."""
    ref = np.full(n, -np.inf)
    np.maximum.at(ref, codes, values)
    return np.where(np.isfinite(ref), ref, 0.0)


def deviations(values: np.ndarray, codes: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row ``x - mean_segment(x)`` (exactly 0 in constant segments), and per-segment counts.

    The mean is taken relative to the segment's largest value, so equal values cancel exactly and
    the result does not depend on the order of the rows (beyond the summation order).
    """
    counts = np.bincount(codes, minlength=n)
    ref = _reference(values, codes, n)
    shifted = values - ref[codes]
    mean_shift = segment_sum(shifted, codes, n) / np.maximum(counts, 1)
    return shifted - mean_shift[codes], counts


def segment_mean(values: np.ndarray, codes: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per segment, the mean of ``values`` and the count (empty segments: mean 0)."""
    counts = np.bincount(codes, minlength=n)
    ref = _reference(values, codes, n)
    shifted = values - ref[codes]
    return ref + segment_sum(shifted, codes, n) / np.maximum(counts, 1), counts


def std_from_deviations(
    dev: np.ndarray, codes: np.ndarray, counts: np.ndarray, ddof: int = 1
) -> np.ndarray:
    """Per segment, the std from deviations from its mean; squares neither overflow nor
    underflow (a segment whose largest deviation is beyond 1e150 or below 1e-150 is scaled by
    it first, so rewards of 1e-200 keep their exact std; other segments are computed as is)."""
    n = len(counts)
    scale = np.zeros(n)
    np.maximum.at(scale, codes, np.abs(dev))
    extreme = (scale > 1e150) | ((scale > 0) & (scale < 1e-150))
    if extreme.any():  # squares would overflow (or vanish): work in units of the largest one
        scale = np.where(extreme, scale, 1.0)
        dev = dev / scale[codes]
    ss = np.bincount(codes, weights=dev * dev, minlength=n)
    denom = counts - ddof
    std = np.sqrt(np.where(denom > 0, ss / np.where(denom > 0, denom, 1), 0.0))
    return std * scale if extreme.any() else std


def segment_std(values: np.ndarray, codes: np.ndarray, n: int, ddof: int = 1) -> np.ndarray:
    """Per segment, the standard deviation (0 where a segment has <= ddof members)."""
    dev, counts = deviations(values, codes, n)
    return std_from_deviations(dev, codes, counts, ddof)


def normalize(
    values: np.ndarray,
    codes: np.ndarray,
    n: int,
    mode: Mode = "mean_std",
    ddof: int = 1,
    eps: float = EPS,
    singleton: Singleton = "zero",
) -> np.ndarray:
    """Normalise ``values`` within segments: ``x - mean`` or ``(x - mean) / (std + eps)``.

    ``ddof=1`` is the unbiased std (``torch.std``), ``ddof=0`` the population std.
    ``singleton``: what a segment of one member gets: ``"zero"`` (no baseline, no signal), or
    ``"raw"`` (mean 0 and std 1, the convention of the verl / verl-agent reference code).
    """
    check_choice("mode", mode, MODES)
    check_choice("singleton", singleton, ("zero", "raw"))
    dev, counts = deviations(values, codes, n)
    out = dev
    if mode == "mean_std":
        std = std_from_deviations(dev, codes, counts, ddof)
        out = dev / (std[codes] + eps)
    if singleton == "raw":
        single = counts[codes] == 1
        if single.any():
            raw = values / (1.0 + eps) if mode == "mean_std" else values
            out = np.where(single, raw, out)
    return out


def combine_codes(*codes: tuple[np.ndarray, int]) -> tuple[np.ndarray, int]:
    """Joint codes for tuples of code arrays: rows share a code iff they share every input code.

    Each argument is ``(codes, n)`` with codes in ``0..n-1``; returns ``(codes, k)``.
    """
    acc, size = codes[0]
    acc = np.asarray(acc, dtype=np.int64)
    for c, n in codes[1:]:
        if size * max(n, 1) >= 2**62:  # re-densify before the product could overflow
            acc, size = densify(acc, size)
        acc = acc * n + np.asarray(c, dtype=np.int64)
        size = size * n
    return densify(acc, size)


def densify(keys: np.ndarray, size: int) -> tuple[np.ndarray, int]:
    """Map integer keys in ``0..size-1`` to dense codes ``0..k-1`` (order-preserving)."""
    if len(keys) == 0:
        return keys.astype(np.int64), 0
    if size <= max(1 << 22, 8 * len(keys)):  # a lookup table: linear time
        present = np.zeros(size, dtype=bool)
        present[keys] = True
        remap = np.cumsum(present) - 1
        return remap[keys].astype(np.int64), int(remap[-1]) + 1
    uniq, inv = np.unique(keys, return_inverse=True)
    return inv.reshape(-1).astype(np.int64), len(uniq)
