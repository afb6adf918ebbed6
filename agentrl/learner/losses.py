"""PPO-clip policy loss, KL penalty estimators, entropy and value losses (pure torch functions).

All functions take per-token tensors ``(B, R)`` with a boolean ``mask`` of real response tokens
and return per-token terms; :func:`aggregate` reduces them:

- ``token-mean``: sum over every token of the mini-batch / number of tokens (DAPO, verl default);
- ``seq-mean-token-mean``: mean over each sequence's tokens, then mean over sequences (GRPO paper);
- ``seq-mean-token-sum``: sum over each sequence's tokens, then mean over sequences (Dr.GRPO-like).

With micro-batches, ``aggregate`` takes the mini-batch's normaliser (token or sequence count) so
that accumulating micro-batch gradients gives exactly the mini-batch loss.
"""

from __future__ import annotations

from typing import Literal

import torch

__all__ = [
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "aggregate",
    "kl_penalty",
    "normaliser",
    "ppo_clip_loss",
    "value_loss",
]

Aggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]
AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
KL_ESTIMATORS = ("k1", "k3")


def ppo_clip_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token PPO-clip loss ``-min(ρA, clip(ρ, 1-ε_low, 1+ε_high)A)`` and diagnostics.

    The log-ratio is clamped to [-20, 20] before ``exp`` so one wild token cannot overflow;
    padding positions contribute 0.
    """
    log_ratio = torch.where(mask, logp - old_logp, torch.zeros_like(logp)).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = -torch.minimum(unclipped, clipped)
    loss = torch.where(mask, loss, torch.zeros_like(loss))
    with torch.no_grad():
        was_clipped = (clipped < unclipped) & mask
        n = mask.sum().clamp(min=1)
        stats = {
            "clip_frac": was_clipped.sum() / n,
            "ratio_mean": torch.where(mask, ratio, torch.zeros_like(ratio)).sum() / n,
            "approx_kl_old": torch.where(
                mask, (ratio - 1) - log_ratio, torch.zeros_like(ratio)
            ).sum()
            / n,
        }
    return loss, stats


def kl_penalty(
    logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, estimator: str = "k3"
) -> torch.Tensor:
    """Per-token estimate of KL(π || π_ref) from samples of π (Schulman's k1 / k3).

    k1 = log π - log π_ref (unbiased, can be negative); k3 = exp(-k1) - 1 + k1 (unbiased, >= 0,
    lower variance). The k3 log-ratio is clamped to [-20, 20] for stability.
    """
    log_ratio = torch.where(mask, logp - ref_logp, torch.zeros_like(logp))
    if estimator == "k1":
        kl = log_ratio
    elif estimator == "k3":
        lr = log_ratio.clamp(-20.0, 20.0)
        kl = torch.exp(-lr) - 1.0 + lr
    else:
        raise ValueError(f"KL estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")
    return torch.where(mask, kl, torch.zeros_like(kl))


def value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip: float | None = None
) -> torch.Tensor:
    """Per-sequence squared error ``0.5 (V - G)^2``, PPO-clipped around the old value if ``clip``."""
    err = (values - returns) ** 2
    if clip is not None:
        clipped = old_values + (values - old_values).clamp(-clip, clip)
        err = torch.maximum(err, (clipped - returns) ** 2)
    return 0.5 * err


def normaliser(mask: torch.Tensor, how: str) -> float:
    """The mini-batch denominator of ``aggregate`` (tokens or sequences with a response)."""
    if how == "token-mean":
        return float(mask.sum())
    if how in ("seq-mean-token-mean", "seq-mean-token-sum"):
        return float((mask.sum(-1) > 0).sum())
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {how!r}")


def aggregate(
    per_token: torch.Tensor, mask: torch.Tensor, how: str, denom: float | None = None
) -> torch.Tensor:
    """Reduce per-token terms to a scalar; ``denom`` is the mini-batch normaliser (default: this batch's)."""
    d = max(denom if denom is not None else normaliser(mask, how), 1.0)
    masked = torch.where(mask, per_token, torch.zeros_like(per_token))
    if how == "token-mean":
        return masked.sum() / d
    lengths = mask.sum(-1)
    if how == "seq-mean-token-mean":
        per_seq = masked.sum(-1) / lengths.clamp(min=1)
        return per_seq.sum() / d
    if how == "seq-mean-token-sum":
        return masked.sum() / d
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {how!r}")
