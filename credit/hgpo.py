"""HGPO: hierarchy-of-groups step advantages (He et al., ICLR 2026; verl-agent ``recipe/hgpo``).

GiGPO's anchor groups pool steps whose *current* state is equal, even when the policy saw
different histories. HGPO assigns every step to one group per history depth
k = 1 .. min(K + 1, t + 1): the steps of the same task group whose last k states (``state_key``
of steps t-k+1..t) are equal, pooled across rollouts and time. Level k = 1 is GiGPO's anchor group.

For each level-k group with >= 2 members, a_k = normalise(G) over its members (G the discounted
return-to-go with ``gamma``; population std, as the reference's ``std(unbiased=False)``). Per step,
items with a_k exactly 0 (including groups of one) are dropped, the rest are weighted by
(k + 1)^alpha and summed with weights w_k / (sum w + eps) (the reference keeps that eps).
``base_group=True`` adds the episode advantage (GRPO over step rows, unbiased std) as a level-0
item with weight 1; without it there is no episode term and a step alone at every level gets 0.

Defaults (the reference recipe): K = ``history_length`` = 2, alpha = 1, mode ``mean_std``,
gamma = 0.95, base_group off, invalid_penalty 0.1 (subtracted from G after discounting and from
the episode score, exactly as for :mod:`agentrl.credit.gigpo`).

Differences from the reference: float64 arithmetic, and groups of equal values give exactly 0 (see
:mod:`agentrl.credit.gigpo`); a deviation from the group mean within 1e-12 of the group's scale counts as
exactly 0 (the reference tests float32 ``!= 0``, so whether an item is dropped there can hinge on
rounding); the history of a step is read from the explicit ``t`` ids rather than from the rows'
order in the batch.

Cost: K + 1 vectorised factorisations and normalisations, linear in the steps.
"""

from __future__ import annotations

import numpy as np

from .batch import StepBatch
from .checks import OPTION_RANGES, check_value
from .diagnostics import episode_diagnostics, group_diagnostics
from .gigpo import step_returns
from .grpo import episode_advantages
from .ops import EPS, Mode, check_choice, deviations, std_from_deviations
from .registry import CreditResult, register

__all__ = ["hgpo"]


def _level_advantages(
    x: np.ndarray, codes: np.ndarray, n: int, mode: str, eps: float
) -> np.ndarray:
    """Normalise within groups (population std), with deviations at rounding level set to exactly 0.

    HGPO drops items that are exactly 0, so whether a step's return equals its group's mean must
    not hinge on the last bit of a sum: |x - mean| <= 1e-12 * (largest |x| of the group) is 0.
    """
    dev, counts = deviations(x, codes, n)
    scale = np.zeros(n)
    np.maximum.at(scale, codes, np.abs(x))
    dev = np.where(np.abs(dev) <= 1e-12 * scale[codes], 0.0, dev)
    dev = np.where(counts[codes] > 1, dev, 0.0)
    if mode == "mean":
        return dev
    std = std_from_deviations(dev, codes, counts, ddof=0)  # squares of 1e160 would overflow
    return dev / (std[codes] + eps)


@register("hgpo", groups=True)
def hgpo(
    batch: StepBatch,
    *,
    history_length: int = 2,
    alpha: float = 1.0,
    gamma: float = 0.95,
    mode: Mode = "mean_std",
    base_group: bool = False,
    invalid_penalty: float = 0.1,
    eps: float = EPS,
) -> CreditResult:
    """HGPO: weighted sum of step advantages over history-consistent groups of depth 1..K+1."""
    check_choice("mode", mode, ("mean", "mean_std"))
    check_value("history_length", history_length, OPTION_RANGES["hgpo"]["history_length"])
    check_value("alpha", alpha, OPTION_RANGES["hgpo"]["alpha"])
    # Levels deeper than the longest trajectory hold no step: they would only cost time.
    levels = min(int(history_length), int(batch.traj_length.max()) - 1) + 1
    with np.errstate(over="ignore", under="ignore"):  # (k + 1)^alpha, k = 1..levels
        weights = np.power(np.arange(2.0, levels + 2.0), float(alpha))
    if not (np.isfinite(weights).all() and (weights > 0).all()):
        raise ValueError(
            f"option 'alpha' of credit module 'hgpo' is too large in magnitude for "
            f"{levels} history levels: the level weights (k + 1)^alpha over- or underflow "
            f"float64 (got alpha={alpha!r}, weights {weights.min():.3g}..{weights.max():.3g})"
        )
    G = step_returns(batch, gamma, invalid_penalty)
    num = np.zeros(len(batch))  # sum of w_k a_k over the non-zero items of each step
    den = np.zeros(len(batch))  # sum of their weights
    diag = episode_diagnostics(batch)
    components: dict[str, np.ndarray] = {}
    for k, (codes, n) in enumerate(batch.history_levels(levels), start=1):
        rows = np.flatnonzero(codes >= 0)
        a = np.zeros(len(batch))
        a[rows] = _level_advantages(G[rows], codes[rows], n, mode, eps)
        w = float(weights[k - 1])
        item = a != 0
        num += np.where(item, w * a, 0.0)
        den += w * item
        components[f"k{k}"] = a
        diag.update(group_diagnostics(batch, f"k{k}", codes, n, G))
    # The hierarchy alone (what composition stacks on another base).
    components["step"] = np.where(den > 0, num / (den + eps), 0.0)
    if base_group:
        A_E = episode_advantages(
            batch, mode, "per_step_rows", eps, "raw", invalid_penalty=invalid_penalty
        )
        item = A_E != 0
        num = num + np.where(item, A_E, 0.0)  # level 0, weight (0 + 1)^alpha = 1
        den = den + item
        components["episode"] = A_E
    adv = np.where(den > 0, num / (den + eps), 0.0)
    return CreditResult(adv, diag, components)
