"""One micro-batch's share of the PPO objective, from its forward pass (a pure function).

``loss = policy - entropy_coef * entropy + kl_coef * KL`` with every term reduced by
:func:`~agentrl.learner.losses.aggregate` over the response tokens and normalised by the whole
mini-batch's ``denom`` (its token or sequence count), so the micro-batches' gradients add up to
the mini-batch gradient. The value loss is added by the learner (it needs the value head).
"""

from __future__ import annotations

import torch

from ..config import LearnerConfig
from .losses import aggregate, kl_penalty, ppo_clip_loss

__all__ = ["policy_objective"]


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
) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The loss, its detached terms and the PPO diagnostics of one micro-batch.

    All tensors are ``(B, R)`` over the response window: ``mask`` marks the response tokens,
    ``pg_mask`` those in the policy-gradient term (``mask`` less HiPER's masked-out spans),
    ``ref_logp`` the reference policy's log-probs (``None``: no KL term).
    """
    pg, stats = ppo_clip_loss(logp, old_logp, tok_adv, pg_mask, cfg.clip_low, cfg.clip_high)
    policy = aggregate(pg, mask, cfg.loss_agg, denom)
    loss = policy
    ent = aggregate(entropy, mask, cfg.loss_agg, denom)
    if cfg.entropy_coef:
        loss = loss - cfg.entropy_coef * ent
    kl = torch.zeros((), device=loss.device)
    if ref_logp is not None:
        per = kl_penalty(logp, ref_logp, mask, cfg.kl_estimator)
        kl = aggregate(per, mask, cfg.loss_agg, denom)
        loss = loss + cfg.kl_coef * kl
    terms = {"policy_loss": policy.detach(), "entropy": ent.detach(), "kl_ref": kl.detach()}
    return loss, terms, stats
