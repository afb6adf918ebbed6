"""PPO-clip policy loss, KL estimators, entropy and value losses (pure torch functions).

All functions take per-token tensors ``(B, R)`` with a boolean ``mask`` of the tokens in the
loss and return per-token terms that are exactly 0 off the mask (``torch.where``, whose backward
gives those positions a gradient of exactly 0); :func:`aggregate` reduces them:

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
#: Schulman's estimators of KL(π || π_ref). The learner's loss takes k2 or k3 (k1's gradient is 0
#: in expectation, see :func:`kl_penalty`); k1 is here for values (diagnostics, reward shaping).
KL_ESTIMATORS = ("k1", "k2", "k3")


def ppo_clip_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token PPO-clip loss ``-min(ρA, clip(ρ, 1-ε_low, 1+ε_high)A)`` and per-token diagnostics.

    ``weights`` (detached, per token) multiply the loss: an off-policy correction's importance
    weights and masks (:mod:`agentrl.learner.corrections`); ``None`` is a weight of 1.

    The log-ratio is clamped to [-20, 20] before ``exp`` so one wild token cannot overflow;
    positions off ``mask`` contribute 0. The diagnostics (detached, 0 off the mask) are
    ``clip_frac`` (1 where the clipped term is the smaller), ``ratio_mean`` (ρ) and
    ``approx_kl_old`` (``ρ - 1 - log ρ``, k3 of KL(π_old || π)); a metric is their sum over the
    mask divided by the mask's count.
    """
    zero = torch.zeros_like(logp)
    log_ratio = torch.where(mask, logp - old_logp, zero).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = torch.where(mask, -torch.minimum(unclipped, clipped), zero)
    if weights is not None:
        loss = loss * weights.detach()
    with torch.no_grad():
        diag = {
            "clip_frac": ((clipped < unclipped) & mask).to(logp.dtype),
            "ratio_mean": torch.where(mask, ratio, zero),
            "approx_kl_old": torch.where(mask, (ratio - 1) - log_ratio, zero),
        }
    return loss, diag


def kl_penalty(
    logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, estimator: str = "k2"
) -> torch.Tensor:
    """Per-token estimate of KL(π || π_ref) from tokens sampled from π (Schulman's k1 / k2 / k3).

    With ``d = log π - log π_ref`` at the sampled token:

    - k1 = d: unbiased value; as a loss its gradient ∇log π has expectation 0 (no KL gradient);
    - k2 = d² / 2: biased value (≥ 0); its gradient d ∇log π has the expectation ∇KL(π || π_ref);
    - k3 = exp(-d) - 1 + d: unbiased value (≥ 0, lower variance); its gradient
      (1 - π_ref/π) ∇log π has the expectation ∇KL(π_ref || π), the other direction (equal to
      first order near π_ref). Its log-ratio is clamped to [-20, 20] before ``exp``.
    """
    d = torch.where(mask, logp - ref_logp, torch.zeros_like(logp))
    if estimator == "k1":
        kl = d
    elif estimator == "k2":
        kl = 0.5 * d * d
    elif estimator == "k3":
        lr = d.clamp(-20.0, 20.0)
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
    """The mini-batch denominator of ``aggregate`` (tokens in the loss, or sequences with one)."""
    if how == "token-mean":
        return float(mask.sum())
    if how in ("seq-mean-token-mean", "seq-mean-token-sum"):
        return float((mask.sum(-1) > 0).sum())
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {how!r}")


def aggregate(
    per_token: torch.Tensor, mask: torch.Tensor, how: str, denom: float | None = None
) -> torch.Tensor:
    """Reduce per-token terms to a scalar; ``denom`` is the mini-batch normaliser (default: this
    batch's). ``seq-mean-token-mean`` divides each sequence by its own count of ``mask`` tokens."""
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
