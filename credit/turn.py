"""Turn-level advantages from per-turn rewards (one step = one turn).

Three variants (``variant``):

- ``"returns"`` (GTPO-style discounted turn returns, [paper]): G_{i,t} = sum_{j>=t} gamma^(j-t) r_{i,j}
  over the per-turn signal (the ``reward`` column, or ``extras[signal_key]``), normalised across
  the task group *at each turn index*: the cells (group, t). A cell of one rollout gets 0.
- ``"mt_grpo"`` (MT-GRPO, Zeng et al., 2025, arXiv:2505.11821; code: SiliangZeng/Multi-Turn-RL-Agent):
  two streams, each group-normalised: the outcome R^O_i (the rollout's return, ``reward`` summed)
  as GRPO over rollouts, and the turn reward ``extras["turn_reward"]`` normalised within its
  (group, turn index) cell. A_{i,t} = A^O_i + weight * A^T_{i,t}. A turn without a turn reward
  (0 for every rollout at that index) gets A^O only, exactly as the reference gives the turns
  after the rewarded one the outcome advantage alone.
- ``"a2tgpo"`` (A2TGPO, [paper]): normalise the per-turn signal within (group, turn index) cells,
  optionally clip it to [-clip, clip], then A_{i,t} = sum_{j>=t} gamma^(j-t) a_{i,j} / sqrt(T_i - t)
  (accumulated with discount and divided by the square root of the number of terms).

Defaults: gamma 0.95, weight 1, mode ``mean_std`` (unbiased std), eps 1e-6 (the MT-GRPO code uses
1e-4: pass ``eps=1e-4`` to match it). Difference from MT-GRPO's code: a rollout whose tool call
produced no result there gets the z-score of (turn + outcome) reward on all tokens; here every
rollout gets the two-stream form, its missing turn reward counting as 0.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from .batch import StepBatch, StepBatchError
from .checks import OPTION_RANGES, UNIT, check_value
from .diagnostics import episode_diagnostics, group_diagnostics
from .grpo import episode_advantages
from .ops import EPS, Mode, check_choice, combine_codes, normalize
from .registry import CreditResult, register

__all__ = ["turn", "turn_cells"]

Variant = Literal["returns", "mt_grpo", "a2tgpo"]


def turn_cells(batch: StepBatch) -> tuple[np.ndarray, int]:
    """Codes of the (task group, turn index) cells."""
    return combine_codes((batch.group_index, batch.num_groups), (batch.t, int(batch.t.max()) + 1))


def _signal(batch: StepBatch, key: str | None) -> np.ndarray:
    if key is None:
        return batch.reward
    col = batch.require(
        key,
        f"pass extras={{{key!r}: [per-step floats]}} to StepBatch, or change option 'signal_key'",
    )
    try:
        arr = np.asarray(col, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise StepBatchError(f"extras[{key!r}] must hold numbers: {exc}") from exc
    bad = ~np.isfinite(arr)
    if bad.any():
        raise StepBatchError(
            f"extras[{key!r}] has NaN or infinite values at rows {np.flatnonzero(bad)[:10].tolist()}"
        )
    return arr


def _turn_needs(o: dict) -> set[str]:
    """The per-turn signal column, when it is not the reward column."""
    key = o["signal_key"] or ("turn_reward" if o["variant"] == "mt_grpo" else None)
    return {key} if key else set()


@register("turn", needs=_turn_needs, groups=True)
def turn(
    batch: StepBatch,
    *,
    variant: Variant = "returns",
    gamma: float = 0.95,
    weight: float = 1.0,
    mode: Mode = "mean_std",
    signal_key: str | None = None,
    clip: float | None = None,
    eps: float = EPS,
) -> CreditResult:
    """Turn-level advantages normalised per (group, turn index)."""
    check_choice("variant", variant, ("returns", "mt_grpo", "a2tgpo"))
    check_choice("mode", mode, ("mean", "mean_std"))
    check_value("gamma", gamma, UNIT)
    codes, n = turn_cells(batch)
    diag = episode_diagnostics(batch)
    if variant == "returns":
        G = batch.discounted_returns(gamma, _signal(batch, signal_key))
        adv = normalize(G, codes, n, mode, ddof=1, eps=eps, singleton="zero")
        diag.update(group_diagnostics(batch, "turn", codes, n, G))
        return CreditResult(adv, diag, {"step": adv})
    if variant == "mt_grpo":
        rt = _signal(batch, signal_key or "turn_reward")
        A_T = normalize(rt, codes, n, mode, ddof=1, eps=eps, singleton="zero")
        A_O = episode_advantages(batch, mode, "per_trajectory", eps, "raw")
        diag.update(group_diagnostics(batch, "turn", codes, n, rt))
        return CreditResult(A_O + weight * A_T, diag, {"episode": A_O, "step": A_T})
    sig = _signal(batch, signal_key)
    a = normalize(sig, codes, n, mode, ddof=1, eps=eps, singleton="zero")
    if clip is not None:
        check_value("clip", clip, OPTION_RANGES["turn"]["clip"])
        a = np.clip(a, -clip, clip)
    remaining = (batch.traj_length[batch.traj_index] - batch.t).astype(np.float64)
    adv = batch.reverse_accumulate(a, gamma) / np.sqrt(remaining)
    diag.update(group_diagnostics(batch, "turn", codes, n, sig))
    return CreditResult(adv, diag, {"step": adv})
