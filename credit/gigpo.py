"""GiGPO: group-in-group advantages with anchor-state step groups (Feng et al., 2025, arXiv:2505.10978).

    A_{i,t} = A^E_{i,t} + omega * A^S_{i,t}

- Episode term A^E (Eq. 3): the GRPO advantage of the rollout's return, statistics over step rows
  by default (``episode_stats="per_step_rows"``, the reference code's
  ``compute_mean_std_cross_steps=True``); a group of one row gets mean 0, std 1.
- Anchor-state groups (Eq. 6): within a task group, all steps (of every rollout and time index)
  whose ``state_key`` is equal.
- Step term A^S (Eq. 7): within each anchor group, the discounted return-to-go
  G_{i,t} = sum_{j>=t} gamma^(j-t) r_{i,j} minus the group mean (``mode="mean"``) or its z-score
  with the unbiased std (``mode="mean_std"``). An anchor group of one step gets 0.
- The same ``mode`` at both levels, as in the reference.

Invalid-action penalty (reference: ``apply_invalid_action_penalty``, coefficient 0.1): c is
subtracted from an invalid step's G_{i,t} *after* discounting (it does not reach earlier steps)
and from that row's episode score. The step batch's ``reward`` must be the raw env reward; do not
subtract the penalty before calling this module as well.

Similarity grouping (reference option ``enable_similarity``): with ``similarity=θ`` in (0, 1),
anchor groups are built from the text in ``extras["observation"]`` instead of ``state_key``: each
step joins the first existing cluster whose first member's text has a difflib ratio >= θ with its
own, or opens a new cluster. The greedy pass visits steps in (traj id, t) order, so the result
does not depend on row order (the reference visits them in batch order).

Defaults (the reference recipe): gamma 0.95, omega 1.0, mode ``mean_std``, eps 1e-6,
invalid_penalty 0.1. Differences from the reference, all deliberate:
- float64 arithmetic (the reference uses float32); a group whose values are all equal gets an
  advantage of exactly 0 (float32 means can leave ~1e-8 residues that ``mean_std`` divides by
  ``std + 1e-6``).
- ``mode`` names: ``mean`` / ``mean_std`` for the reference's ``mean_norm`` / ``mean_std_norm``.
- ``episode_stats="per_trajectory"`` offers the paper's per-rollout statistics.
- The "dynamic sampling" variant (drop groups whose rewards are all equal) is a rollout filter,
  not an estimator; it belongs to the trainer.

Cost: one factorisation of ``state_key`` plus a few ``bincount`` passes, linear in the steps.
"""

from __future__ import annotations

from difflib import SequenceMatcher
from typing import Any

import numpy as np

from .batch import StepBatch, StepBatchError
from .checks import OPTION_RANGES, UNIT, check_value
from .diagnostics import episode_diagnostics, group_diagnostics
from .grpo import Stats, episode_advantages
from .ops import EPS, Mode, check_choice, normalize
from .registry import CreditResult, register

__all__ = ["gigpo", "similarity_groups", "step_returns"]


def step_returns(batch: StepBatch, gamma: float, invalid_penalty: float = 0.0) -> np.ndarray:
    """Per row, G_{i,t} with ``gamma``, minus ``invalid_penalty`` on invalid steps (after discounting)."""
    check_value("gamma", gamma, UNIT)
    G = batch.discounted_returns(gamma)
    if invalid_penalty:
        G = G - invalid_penalty * (~batch.valid)
    return G


def similarity_groups(
    batch: StepBatch, threshold: float, key: str = "observation"
) -> tuple[np.ndarray, int]:
    """Greedy text-similarity clusters within each task group (GiGPO's ``enable_similarity``).

    A step joins the first cluster (in creation order) whose representative (its first member)
    has ``SequenceMatcher(None, text, rep).ratio() >= threshold``; otherwise it starts a cluster.
    Steps are visited in (group, traj id, t) order. Identical texts are clustered once (they
    provably land in the same cluster), and the cheap upper bounds ``real_quick_ratio`` and
    ``quick_ratio`` skip hopeless comparisons, so the result equals the plain greedy pass.
    """
    check_value("similarity", threshold, OPTION_RANGES["gigpo"]["similarity"])
    text = batch.require(
        key,
        f"similarity grouping reads the step's observation text from extras[{key!r}]; pass extras={{{key!r}: [...]}} to StepBatch",
    )
    order = np.lexsort((batch.t, batch.traj, batch.group))
    codes = np.empty(len(batch), dtype=np.int64)
    n_clusters = 0
    start = 0
    groups = batch.group[order]
    bounds = np.flatnonzero(np.diff(groups)) + 1
    for stop in [*bounds.tolist(), len(order)]:
        rows = order[start:stop]
        start = stop
        reps: list[SequenceMatcher] = []
        seen: dict[Any, int] = {}
        for r in rows.tolist():
            obs = text[r]
            if not isinstance(obs, str):
                raise StepBatchError(
                    f"extras[{key!r}] must hold strings for similarity grouping; row {r} has {type(obs).__name__}"
                )
            hit = seen.get(obs)
            if hit is None:
                for ci, sm in enumerate(reps):
                    sm.set_seq1(obs)
                    if (
                        sm.real_quick_ratio() >= threshold
                        and sm.quick_ratio() >= threshold
                        and sm.ratio() >= threshold
                    ):
                        hit = ci
                        break
                if hit is None:
                    sm = SequenceMatcher(None, "", obs)  # seq2 (cached side) is the representative
                    reps.append(sm)
                    hit = len(reps) - 1
                seen[obs] = hit
            codes[r] = n_clusters + hit
        n_clusters += len(reps)
    return codes, n_clusters


@register(
    "gigpo",
    needs=lambda o: {o["similarity_key"]} if o["similarity"] is not None else (),
    groups=True,
)
def gigpo(
    batch: StepBatch,
    *,
    gamma: float = 0.95,
    omega: float = 1.0,
    mode: Mode = "mean_std",
    episode_stats: Stats = "per_step_rows",
    invalid_penalty: float = 0.1,
    eps: float = EPS,
    similarity: float | None = None,
    similarity_key: str = "observation",
) -> CreditResult:
    """GiGPO: episode-level GRPO term plus omega times the anchor-state step term."""
    check_choice("mode", mode, ("mean", "mean_std"))
    A_E = episode_advantages(
        batch, mode, episode_stats, eps, "raw", invalid_penalty=invalid_penalty
    )
    G = step_returns(batch, gamma, invalid_penalty)
    if similarity is None:
        codes, n = batch.anchor_index, batch.num_anchors
    else:
        codes, n = similarity_groups(batch, float(similarity), similarity_key)
    A_S = normalize(G, codes, n, mode, ddof=1, eps=eps, singleton="zero")
    adv = A_E + omega * A_S
    diag = episode_diagnostics(batch)
    diag.update(group_diagnostics(batch, "step", codes, n, G))
    return CreditResult(adv, diag, {"episode": A_E, "step": A_S})
