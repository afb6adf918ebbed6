"""One micro-batch's share of the PPO objective, from its forward pass (a pure function).

``loss = policy - entropy_coef * entropy + kl_coef * KL`` over the tokens in the loss (``mask``:
by default the sampled response tokens, see ``trainer.loss_tokens``), each term reduced by
:func:`~agentrl.learner.losses.aggregate` and normalised by the whole mini-batch's ``denom`` (its
count of tokens in the loss, or of sequences with one), so the micro-batches' gradients add up to
the mini-batch gradient. The value loss is added by the learner (it needs the value head).

The diagnostics come back as token sums (and the counts they are over), so that the learner's
metrics are token-weighted means whatever the micro-batch layout.
"""

from __future__ import annotations

import torch

from ..config import LearnerConfig
from .losses import aggregate, kl_penalty, ppo_clip_loss

__all__ = ["policy_objective", "token_metrics"]


def policy_objective(
    logp: torch.Tensor,
    entropy: torch.Tensor,
    old_logp: torch.Tensor,
    tok_adv: torch.Tensor,
    mask: torch.Tensor,
    pg_mask: torch.Tensor,
    ref_logp: torch.Tensor | None,
    cfg: LearnerConfig,
    denom: float,
    pg_weight: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, float]]:
    """The loss, its detached terms and the token sums of one micro-batch's diagnostics.

    All tensors are ``(B, R)`` over the response window: ``mask`` marks the tokens in the loss
    (its denominators, entropy and KL terms), ``pg_mask`` those in the policy-gradient term (the
    same by default; with ``trainer.loss_tokens=all``, ``mask`` less HiPER's masked-out spans),
    ``ref_logp`` the reference policy's log-probs (``None``: no KL term). Tokens off the masks
    get a gradient of exactly 0. ``pg_weight``: an off-policy correction's detached weight of each
    token's policy-gradient term (``None``: 1).

    Token sums: ``entropy`` and ``kl_ref`` over ``tokens`` (the count of ``mask``);
    ``clip_frac``, ``ratio_mean`` and ``approx_kl_old`` over ``pg_tokens``.
    """
    pg, diag = ppo_clip_loss(
        logp, old_logp, tok_adv, pg_mask, cfg.clip_low, cfg.clip_high, weights=pg_weight
    )
    policy = aggregate(pg, mask, cfg.loss_agg, denom)
    loss = policy
    ent = aggregate(entropy, mask, cfg.loss_agg, denom)
    if cfg.entropy_coef:
        loss = loss - cfg.entropy_coef * ent
    kl_sum = 0.0
    if ref_logp is not None:
        per = kl_penalty(logp, ref_logp, mask, cfg.kl_estimator)
        loss = loss + cfg.kl_coef * aggregate(per, mask, cfg.loss_agg, denom)
        kl_sum = float(per.detach().sum())
    zero = torch.zeros_like(entropy)
    sums = {
        "tokens": float(mask.sum()),
        "pg_tokens": float(pg_mask.sum()),
        "entropy": float(torch.where(mask, entropy.detach(), zero).sum()),
        "kl_ref": kl_sum,
        **{k: float(v.sum()) for k, v in diag.items()},
    }
    return loss, {"policy_loss": policy.detach()}, sums


def token_metrics(sums: dict[str, float]) -> dict[str, float]:
    """An update's per-token metrics from its token sums (0 where it trained no token):
    ``entropy`` and ``kl_ref`` (the estimator in the loss) over the tokens in the loss;
    ``clip_frac``, ``ratio_mean``, ``approx_kl_old`` over the policy-gradient tokens; and
    ``loss_token_fraction``, the tokens in the loss over the response tokens processed; and
    ``forward_row_fraction``, the rows the forward passes ran over the rows trained (equal rows
    share one pass)."""
    n, n_pg = sums.get("tokens", 0.0), sums.get("pg_tokens", 0.0)
    resp = sums.get("response_tokens", 0.0)
    out = {k: sums.get(k, 0.0) / n if n else 0.0 for k in ("entropy", "kl_ref")}
    for k in ("clip_frac", "ratio_mean", "approx_kl_old"):
        out[k] = sums.get(k, 0.0) / n_pg if n_pg else 0.0
    out["loss_token_fraction"] = n / resp if resp else 0.0
    rows = sums.get("rows", 0.0)
    out["forward_row_fraction"] = sums.get("forward_rows", 0.0) / rows if rows else 0.0
    return out
