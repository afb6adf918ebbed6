"""Vectorised group statistics shared by credit modules (segment means, stds, normalisation)."""

from __future__ import annotations

from typing import Literal

import numpy as np

Mode = Literal["mean", "mean_std"]
EPS = 1e-6


def segment_mean(values: np.ndarray, codes: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per segment code, the mean of ``values`` and the count (empty segments: mean 0)."""
    counts = np.bincount(codes, minlength=n)
    sums = np.bincount(codes, weights=values, minlength=n)
    return sums / np.maximum(counts, 1), counts


def segment_std(values: np.ndarray, codes: np.ndarray, n: int, ddof: int = 1) -> np.ndarray:
    """Per segment code, the standard deviation (0 where there are <= ddof members).

    Two-pass (deviations from the segment mean) so large offsets do not cancel catastrophically.
    """
    mean, counts = segment_mean(values, codes, n)
    dev = values - mean[codes]
    ss = np.bincount(codes, weights=dev * dev, minlength=n)
    denom = counts - ddof
    return np.sqrt(np.where(denom > 0, ss / np.where(denom > 0, denom, 1), 0.0))


def normalize(
    values: np.ndarray,
    codes: np.ndarray,
    n: int,
    mode: Mode = "mean_std",
    ddof: int = 1,
    eps: float = EPS,
    singleton: Literal["zero", "raw"] = "zero",
) -> np.ndarray:
    """Normalise ``values`` within segments: ``x - mean`` or ``(x - mean) / (std + eps)``.

    ``singleton``: what a segment of one member gets: ``"zero"`` (no baseline, no signal), or
    ``"raw"`` (mean 0 and std 1, the convention of the verl / verl-agent reference code).
    """
    if mode not in ("mean", "mean_std"):
        raise ValueError(f"mode must be 'mean' or 'mean_std', got {mode!r}")
    mean, counts = segment_mean(values, codes, n)
    out = values - mean[codes]
    if mode == "mean_std":
        std = segment_std(values, codes, n, ddof)
        out = out / (std[codes] + eps)
    single = counts[codes] == 1
    if single.any():
        raw = values / (1.0 + eps) if mode == "mean_std" else values
        out = np.where(single, raw if singleton == "raw" else 0.0, out)
    return out
