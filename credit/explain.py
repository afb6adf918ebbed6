"""Per-step explanations of a credit module's groups: which rows it compared each step with.

:func:`step_groups` recomputes, from the batch and the module's options, the groups and baselines
a module's advantage of each row was formed against: the episode group (its size, its return and
the baseline the episode term subtracts: group mean, leave-one-out mean or the mean over step
rows), GiGPO's anchor-state group (id, size, the step's discounted return-to-go and the group's
mean of it), HGPO's history groups per depth k (id and size). It is a pure function beside the
modules: it calls their own helpers (``step_returns``, ``row_scores``, ``similarity_groups``,
``history_levels``) and never changes what a module computes; trajectory traces and their viewer
read it. A module without groups of its own gets the episode columns only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .batch import StepBatch
from .compose import parse_spec
from .gigpo import similarity_groups, step_returns
from .grpo import row_scores
from .ops import segment_mean
from .registry import options as module_options

__all__ = ["step_groups"]


def _resolved(name: str, opts: Mapping[str, Any]) -> dict[str, Any]:
    """The module's defaults overlaid with the given options (unknown ones are ignored here:
    :func:`agentrl.credit.compute` is the one that refuses them)."""
    defaults = module_options(name)
    return {**defaults, **{k: v for k, v in opts.items() if k in defaults}}


def _sizes(codes: np.ndarray, n: int) -> np.ndarray:
    """Per row, the size of its group (0 for a row in none, code -1)."""
    inside = codes >= 0
    counts = np.bincount(codes[inside], minlength=max(n, 1))
    out = np.zeros(len(codes), dtype=np.int64)
    out[inside] = counts[codes[inside]]
    return out


#: The modules whose episode term subtracts a baseline :func:`_episode` can name.
_EPISODE_BASELINE = ("grpo", "rloo", "gigpo", "hgpo")


def _episode(batch: StepBatch, name: str, o: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Episode group, its size in rollouts, the rollout's return and the episode baseline (for the
    modules of :data:`_EPISODE_BASELINE`; others get the group's mean return, named as such)."""
    R = batch.episode_return
    tg, ng = batch.traj_group, batch.num_groups
    out = {
        "episode_group": batch.group,
        "episode_group_size": np.bincount(tg, minlength=ng)[batch.group_index],
        "episode_return": R[batch.traj_index],
    }
    if name not in _EPISODE_BASELINE or (name == "hgpo" and not o.get("base_group")):
        out["episode_mean_return"] = segment_mean(R, tg, ng)[0][batch.group_index]
        return out
    penalty = float(o.get("invalid_penalty") or 0.0)
    stats = o.get("stats", o.get("episode_stats", "per_trajectory"))
    if name == "rloo":  # the mean of the group's other rollouts (or other rows)
        score = row_scores(batch, penalty)
        vals, codes = (R, tg) if stats == "per_trajectory" else (score, batch.group_index)
        total = np.bincount(codes, weights=vals, minlength=ng)
        count = np.bincount(codes, minlength=ng)
        c = count[batch.group_index].astype(np.float64)
        mine = R[batch.traj_index] if stats == "per_trajectory" else score
        out["episode_baseline"] = np.where(
            c > 1, (total[batch.group_index] - mine) / np.maximum(c - 1, 1), 0.0
        )
    elif stats == "per_step_rows":  # GiGPO's default: the mean over the group's step rows
        score = row_scores(batch, penalty)
        out["episode_baseline"] = segment_mean(score, batch.group_index, ng)[0][batch.group_index]
    else:
        out["episode_baseline"] = segment_mean(R, tg, ng)[0][batch.group_index]
    return out


def step_groups(batch: StepBatch, name: str, **options: Any) -> dict[str, np.ndarray]:
    """Per row, the groups and baselines module ``name`` (with ``options``) formed its advantage
    against; every array has one entry per batch row. Keys: ``episode_group``,
    ``episode_group_size``, ``episode_return`` (every module), ``episode_baseline`` (GRPO, RLOO,
    GiGPO, HGPO with ``base_group``) or ``episode_mean_return`` (the others); with GiGPO
    ``anchor_group``, ``anchor_size``, ``step_return``, ``anchor_baseline``; with HGPO
    ``step_return`` and ``history_k<k>_group``/``history_k<k>_size`` (-1 / 0: the step is too early
    for depth k); with ``compose``, those of its base and terms (the first one to name a key wins).
    """
    if name == "compose":
        out: dict[str, np.ndarray] = {}
        specs = [options.get("base") or "grpo", *(options.get("terms") or ())]
        for i, spec in enumerate(specs):
            sub, opts, _, _ = parse_spec(spec, "base" if i == 0 else f"terms[{i - 1}]")
            for k, v in step_groups(batch, sub, **opts).items():
                out.setdefault(k, v)
        return out
    o = _resolved(name, options)
    out = _episode(batch, name, o)
    penalty = float(o.get("invalid_penalty") or 0.0)
    if name == "gigpo":
        G = step_returns(batch, float(o["gamma"]), penalty)
        if o.get("similarity") is None:
            codes, n = batch.anchor_index, batch.num_anchors
        else:
            codes, n = similarity_groups(batch, float(o["similarity"]), o["similarity_key"])
        out.update(
            anchor_group=codes,
            anchor_size=_sizes(codes, n),
            step_return=G,
            anchor_baseline=segment_mean(G, codes, n)[0][codes],
        )
    elif name == "hgpo":
        out["step_return"] = step_returns(batch, float(o["gamma"]), penalty)
        levels = min(int(o["history_length"]), int(batch.traj_length.max()) - 1) + 1
        for k, (codes, n) in enumerate(batch.history_levels(levels), start=1):
            out[f"history_k{k}_group"] = codes
            out[f"history_k{k}_size"] = _sizes(codes, n)
    return out
