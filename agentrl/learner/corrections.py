"""Off-policy corrections of the engine-learner mismatch, and its measurement (pure functions).

With ``trainer.old_logprobs=learner`` the learner recomputes, before the PPO epochs, the log-probs
of every sampled token under its own weights (π_old, the *proximal* policy in AReaL's words): the
PPO ratio is then taken against them, and the engine's sampling log-probs are the *behaviour*
policy μ. The two differ because the engine is another kernel in another precision (vLLM), and,
with asynchronous rollouts, because the engine sampled with older weights. Every correction here
is a detached per-token weight ``w_t`` that multiplies the per-token PPO-clip loss (the ratio
π_θ/π_old is still clipped as usual); each is computed once per update from the log-ratio
``d_t = log π_old(t) - log μ(t)`` (clamped to [-20, 20] before ``exp``):

- ``tis``: truncated importance sampling, ``w = min(exp(d), C)`` (Yao et al. 2025, "Your
  efficient RL framework secretly brings you off-policy RL training"). One-sided as published;
  OpenRLHF's ``tis`` clamps into a two-sided band instead.
- ``icepop``: IcePop's two-sided token mask (Ling Team, "Every Step Evolves: Scaling RL for
  Trillion-Scale Thinking Model", the Ring-1T report): ``w = exp(d)`` where ``α <= exp(d) <= β``,
  else 0 (the token leaves the policy gradient).
- ``seq_mask_tis``: sequence-level masked IS as OpenRLHF's ``seq-mask-tis`` defines it, which is
  verl's rollout correction with ``rollout_rs=geometric`` (its "Geo-Mask") and token-level IS
  weights without truncation: a sequence whose geometric-mean ratio ``exp(mean_t d_t)`` lies
  outside ``[low, high]`` is masked whole, the others keep ``w = exp(d)``. The mean is over the
  tokens in the loss (forced tokens have ``d = 0`` and would dilute it). verl also removes a
  rejected sequence from the loss denominator; here (as in OpenRLHF) it stays counted.
- ``decoupled``: AReaL's decoupled PPO (Fu et al. 2025, "AReaL: a large-scale asynchronous
  reinforcement learning system for language reasoning"): the clip is against the proximal
  policy and the loss is weighted by the behaviour importance weight ``w = π_prox/π_behav =
  exp(d)``; with a cap (AReaL's ``behav_imp_weight_cap``) tokens whose weight exceeds it are
  filtered out (weight 0, still counted in the denominator, as AReaL does), not truncated. In a
  synchronous run the proximal policy is the learner's weights before the update, i.e. π_old.

Masked or truncated tokens keep their entropy bonus and reference-KL terms (the corrections act
on the policy-gradient term only, as in the sources) and stay in every denominator.

The mismatch is measured on the tokens in the loss: ``Δ = log π_old - log μ`` (mean, and
percentiles of ``|Δ|``) and KL(μ ‖ π_old) by Schulman's k3 on the tokens μ sampled,
``mean(r - 1 - log r)`` with ``r = π_old/μ = exp(Δ)`` (unbiased, non-negative).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "CORRECTIONS",
    "CorrectionWeights",
    "correction_weights",
    "decoupled_weights",
    "icepop_weights",
    "kept_tokens",
    "mismatch_metrics",
    "seq_mask_tis_weights",
    "tis_weights",
]

CORRECTIONS = ("none", "tis", "icepop", "seq_mask_tis", "decoupled")
_CLAMP = 20.0


def _ratio(log_ratio: np.ndarray) -> np.ndarray:
    return np.exp(np.clip(np.asarray(log_ratio, np.float64), -_CLAMP, _CLAMP))


def tis_weights(log_ratio: np.ndarray, cap: float) -> tuple[np.ndarray, np.ndarray]:
    """TIS: ``min(exp(d), cap)`` per token, and which tokens were truncated."""
    r = _ratio(log_ratio)
    return np.minimum(r, cap), r > cap


def icepop_weights(log_ratio: np.ndarray, low: float, high: float) -> tuple[np.ndarray, np.ndarray]:
    """IcePop: ``exp(d)`` inside ``[low, high]``, 0 outside, and which tokens were masked."""
    r = _ratio(log_ratio)
    out = (r < low) | (r > high)
    return np.where(out, 0.0, r), out


def seq_mask_tis_weights(
    log_ratio: np.ndarray, keep: np.ndarray, low: float, high: float
) -> tuple[np.ndarray, np.ndarray]:
    """Sequence-masked IS for one sequence: ``exp(d)`` per token, or 0 for every token when the
    geometric mean of the ratio over the ``keep`` tokens lies outside ``[low, high]`` (a sequence
    with no such token is kept); and the per-token masked flags."""
    d = np.asarray(log_ratio, np.float64)
    keep = np.asarray(keep, bool)
    r = _ratio(d)
    geo = float(_ratio(np.array(d[keep].mean()))) if keep.any() else 1.0
    if low <= geo <= high:
        return r, np.zeros(len(d), bool)
    return np.zeros(len(d)), np.ones(len(d), bool)


def decoupled_weights(log_ratio: np.ndarray, cap: float | None) -> tuple[np.ndarray, np.ndarray]:
    """AReaL's behaviour weight ``π_prox/π_behav = exp(d)``, 0 where it exceeds ``cap`` (None: no
    cap), and which tokens were filtered out."""
    r = _ratio(log_ratio)
    out = r > cap if cap is not None else np.zeros(r.shape, bool)
    return np.where(out, 0.0, r), out


@dataclass(frozen=True)
class CorrectionWeights:
    """Per sequence, the detached weight of each response token's policy-gradient term, and the
    tokens it truncated (``tis``) or masked (the others)."""

    weights: list[np.ndarray]
    truncated: list[np.ndarray]
    masked: list[np.ndarray]


def correction_weights(
    name: str,
    learner_lp: Sequence[np.ndarray],
    engine_lp: Sequence[np.ndarray],
    keep: Sequence[np.ndarray],
    *,
    cap: float = 2.0,
    icepop_band: tuple[float, float] = (0.5, 5.0),
    seq_band: tuple[float, float] = (0.5, 5.0),
    decoupled_cap: float | None = None,
) -> CorrectionWeights | None:
    """The weights of correction ``name`` (one of :data:`CORRECTIONS`; ``none``: ``None``) from
    the learner's recomputed log-probs π_old and the engine's μ, per sequence."""
    if name not in CORRECTIONS:
        raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}, got {name!r}")
    if name == "none":
        return None
    ws, tr, ms = [], [], []
    for lp, mu, k in zip(learner_lp, engine_lp, keep):
        d = np.asarray(lp, np.float64) - np.asarray(mu, np.float64)
        none = np.zeros(len(d), bool)
        if name == "tis":
            w, t = tis_weights(d, cap)
            m = none
        elif name == "icepop":
            (w, m), t = icepop_weights(d, *icepop_band), none
        elif name == "seq_mask_tis":
            (w, m), t = seq_mask_tis_weights(d, k, *seq_band), none
        else:
            (w, m), t = decoupled_weights(d, decoupled_cap), none
        ws.append(w)
        tr.append(t)
        ms.append(m)
    return CorrectionWeights(ws, tr, ms)


def kept_tokens(per_seq: Sequence[np.ndarray], keep: Sequence[np.ndarray]) -> np.ndarray:
    """The values of the tokens in the loss, all sequences' concatenated (float64)."""
    parts = [np.asarray(a, np.float64)[np.asarray(k, bool)] for a, k in zip(per_seq, keep)]
    return np.concatenate(parts) if parts else np.zeros(0)


def mismatch_metrics(
    delta: np.ndarray,
    weights: np.ndarray | None = None,
    truncated: np.ndarray | None = None,
    masked: np.ndarray | None = None,
) -> dict[str, float]:
    """``offpolicy/*`` metrics from the tokens in the loss: ``delta`` (log π_old - log μ), and
    with a correction, its weights and truncated / masked flags on the same tokens."""
    d = np.asarray(delta, np.float64)
    out: dict[str, float] = {"offpolicy/tokens": float(len(d))}
    if len(d) == 0:
        return out
    a = np.abs(d)
    r = _ratio(d)
    out["offpolicy/logprob_diff_mean"] = float(d.mean())
    out["offpolicy/logprob_absdiff_mean"] = float(a.mean())
    for q in (50, 90, 99):
        out[f"offpolicy/logprob_absdiff_p{q}"] = float(np.percentile(a, q))
    out["offpolicy/logprob_absdiff_max"] = float(a.max())
    out["offpolicy/kl_engine_learner_k3"] = float(np.mean(r - 1.0 - np.clip(d, -_CLAMP, _CLAMP)))
    if weights is not None:
        out["offpolicy/weight_mean"] = float(np.mean(weights))
    if truncated is not None:
        out["offpolicy/truncated_frac"] = float(np.mean(truncated))
    if masked is not None:
        out["offpolicy/masked_frac"] = float(np.mean(masked))
    return out
