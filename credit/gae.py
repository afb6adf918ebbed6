"""Turn-level GAE from critic values (Schulman et al., 2016; turn-level as in Turn-PPO, 2025).

One advantage per turn (step), for PPO with a value head and for Turn-PPO, whose critic reads the
value at the turn boundary (the ``value`` column, V(s_t) of the state the action was taken from):

    delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)          (V after the last step = 0)
    A_t     = sum_l (gamma * lam)^l delta_{t+l}
    returns = A_t + V(s_t)                               (``components["returns"]``: critic target)

With gamma = lam = 1 and a one-step episode, A = r - V (outcome minus value).

Defaults: gamma 0.99 and lam 0.9 (the Turn-PPO paper's turn-level setting, approximately; verl's
token-level PPO uses 1.0 and 1.0), no whitening. ``whiten=True`` standardises the advantages over
the whole batch (mean 0, unit variance, as verl's ``masked_whiten``). A trajectory cut short
(``done`` False at its last step) is not bootstrapped: the value after it is taken as 0, since the
batch carries no value for the state after the last step.
"""

from __future__ import annotations

import numpy as np

from .batch import StepBatch
from .checks import UNIT, check_value
from .diagnostics import episode_diagnostics
from .ops import deviations, std_from_deviations
from .registry import CreditResult, register

__all__ = ["gae"]

HOW = (
    "run the learner with a value head (critic) and fill StepBatch(value=...) with V(s_t) per step"
)


@register("gae", needs={"value"})
def gae(
    batch: StepBatch,
    *,
    gamma: float = 0.99,
    lam: float = 0.9,
    whiten: bool = False,
    invalid_penalty: float = 0.0,
) -> CreditResult:
    """GAE over the steps of each trajectory from the critic's per-step values."""
    check_value("gamma", gamma, UNIT)
    check_value("lam", lam, UNIT)
    V = batch.require("value", HOW)
    r = batch.reward - invalid_penalty * (~batch.valid) if invalid_penalty else batch.reward
    nxt = batch.next_row
    v_next = np.where(nxt >= 0, V[np.maximum(nxt, 0)], 0.0)
    delta = r + gamma * v_next - V
    adv = batch.reverse_accumulate(delta, gamma * lam)
    returns = adv + V
    if whiten:  # (adv - mean) / sqrt(var + 1e-8), without squaring huge deviations
        one = np.zeros(len(adv), dtype=np.int64)
        dev, counts = deviations(adv, one, 1)
        adv = dev / np.hypot(std_from_deviations(dev, one, counts, ddof=0)[0], 1e-4)
    diag = episode_diagnostics(batch)
    diag["value_mean"] = float(V.mean())
    diag["td_error_abs_mean"] = float(np.abs(delta).mean())
    with np.errstate(over="ignore", invalid="ignore"):  # huge returns: nan, not a warning
        var_r = np.var(returns)
        diag["explained_variance"] = float(1.0 - np.var(returns - V) / var_r) if var_r > 0 else 0.0
    return CreditResult(adv, diag, {"step": adv, "returns": returns, "td_error": delta})
