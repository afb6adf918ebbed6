"""GAGPO: a grouped value proxy and GAE over steps, critic-free (2026; [paper + reconstruction]).

The paper's abstract fixes the structure: a non-parametric value proxy built from the group's
rollouts, TD/GAE-style temporal advantages that propagate the outcome backwards, and group-wise
normalisation. Its method text was not available to us; this module implements the reading below,
with the uncertain choices exposed as options.

1. G_{i,t}: discounted return-to-go with ``gamma``.
2. Value proxy V(s) = mean of G over every step of the task group at state s (``state_key``),
   pooled across rollouts and time. ``leave_one_out=True`` excludes the step's own G (a state seen
   once then has no proxy and falls back to its own G, i.e. no TD signal from it).
3. delta_t = r_t + gamma * V(s_{t+1}) - V(s_t), with V after the last step = 0.
4. A_t = sum_l (gamma * lam)^l delta_{t+l} (GAE).
5. A normalised within the task group over its step rows (``mode``; unbiased std).

There is no trajectory-level term (the outcome reaches each step through the TD chain). The
learner's one-importance-ratio-per-turn part of GAGPO is a loss setting, not credit.

Defaults: gamma 0.95, lam 0.9 (the paper reports that lam = 1 hurt; its exact value is not in the
abstract), mode ``mean_std``, leave_one_out off, invalid_penalty 0 (set it to subtract a per-step
cost from r_t for invalid actions).
"""

from __future__ import annotations

import numpy as np

from .batch import StepBatch
from .checks import UNIT, check_value
from .diagnostics import episode_diagnostics, group_diagnostics
from .ops import EPS, Mode, check_choice, normalize, segment_mean, segment_sum
from .registry import CreditResult, register

__all__ = ["gagpo", "grouped_value_proxy"]


def grouped_value_proxy(batch: StepBatch, G: np.ndarray, leave_one_out: bool = False) -> np.ndarray:
    """Per row, the mean return-to-go of the task group's steps at the same state."""
    codes, n = batch.anchor_index, batch.num_anchors
    mean, counts = segment_mean(G, codes, n)
    if not leave_one_out:
        return mean[codes]
    c = counts[codes]
    total = segment_sum(G, codes, n)[codes]
    return np.where(c > 1, (total - G) / np.maximum(c - 1, 1), G)


@register("gagpo", groups=True)
def gagpo(
    batch: StepBatch,
    *,
    gamma: float = 0.95,
    lam: float = 0.9,
    mode: Mode = "mean_std",
    leave_one_out: bool = False,
    invalid_penalty: float = 0.0,
    eps: float = EPS,
) -> CreditResult:
    """GAGPO: GAE over a grouped state-value proxy, normalised within the task group."""
    check_choice("mode", mode, ("mean", "mean_std"))
    check_value("gamma", gamma, UNIT)
    check_value("lam", lam, UNIT)
    r = batch.reward - invalid_penalty * (~batch.valid) if invalid_penalty else batch.reward
    G = batch.discounted_returns(gamma, r)
    V = grouped_value_proxy(batch, G, leave_one_out)
    nxt = batch.next_row
    v_next = np.where(nxt >= 0, V[np.maximum(nxt, 0)], 0.0)
    delta = r + gamma * v_next - V
    raw = batch.reverse_accumulate(delta, gamma * lam)
    adv = normalize(
        raw, batch.group_index, batch.num_groups, mode, ddof=1, eps=eps, singleton="zero"
    )
    diag = episode_diagnostics(batch)
    diag.update(group_diagnostics(batch, "state", batch.anchor_index, batch.num_anchors, G))
    diag.update(group_diagnostics(batch, "gae", batch.group_index, batch.num_groups, raw))
    return CreditResult(adv, diag, {"step": adv, "value_proxy": V, "td_error": delta})
