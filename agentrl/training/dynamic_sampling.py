"""Dynamic sampling: drop task groups whose rollouts all got the same return, draw replacements.

The filter of DAPO (Yu et al., 2025, arXiv:2503.14476; ``filter_groups``) and of GiGPO's
reference code (verl-agent, ``algorithm.filter_groups``): a group whose N rollouts all have the
same return has zero episode-level advantage under GRPO/RLOO-style baselines, so it only adds
compute (and, under z-scoring, nothing else). Such groups are dropped and new groups drawn until
the batch holds ``n_groups`` informative groups or a budget of extra rollouts is spent.

    result = sample_informative(draw, returns, n_groups=8, group_size=8, max_extra_rollouts=64)
    result.groups    # the groups to train on
    result.metrics   # dynamic_sampling/{dropped_groups, extra_groups, extra_rollouts, rounds, short}

``draw(k)`` rolls out k new task groups and returns them; ``returns(group)`` gives the episode
returns of one group's rollouts. Each extra round draws the shortfall divided by the keep rate
seen so far (at least one group, within the budget), so a run where half the groups are
informative refills in about one round.

Differences from the references: DAPO and verl-agent draw whole generation batches per round and
stop with an error after ``max_num_gen_batches`` rounds; here the budget counts rollouts, rounds
draw only what is missing, and a batch still short when the budget is spent is padded with the
most recently dropped groups (``when_short="pad"``, the batch size stays fixed) or trained as is
(``"keep"``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

__all__ = ["DynamicSamplingResult", "is_informative", "sample_informative"]

G = TypeVar("G")


def is_informative(returns: Sequence[float], atol: float = 1e-9) -> bool:
    """Whether a group's returns differ (max - min > atol); a single rollout never does."""
    r = np.asarray(returns, dtype=np.float64)
    if r.size < 2:
        return False
    return bool(r.max() - r.min() > atol)


@dataclass
class DynamicSamplingResult(Generic[G]):
    groups: list[G]
    metrics: dict[str, Any] = field(default_factory=dict)


def sample_informative(
    draw: Callable[[int], Sequence[G]],
    returns: Callable[[G], Sequence[float]],
    n_groups: int,
    *,
    group_size: int,
    max_extra_rollouts: int,
    atol: float = 1e-9,
    when_short: str = "pad",
) -> DynamicSamplingResult[G]:
    """Draw ``n_groups`` groups, then replace uninformative ones within the rollout budget."""
    if n_groups < 1 or group_size < 1:
        raise ValueError(f"n_groups and group_size must be >= 1, got {n_groups}, {group_size}")
    if max_extra_rollouts < 0:
        raise ValueError(f"max_extra_rollouts must be >= 0, got {max_extra_rollouts}")
    if when_short not in ("pad", "keep"):
        raise ValueError(f"when_short must be 'pad' or 'keep', got {when_short!r}")
    kept: list[G] = []
    dropped: list[G] = []
    drawn = 0
    rounds = 0
    want = n_groups
    budget = max_extra_rollouts // group_size  # extra groups we may still draw
    while want > 0:
        if rounds > 0 and budget <= 0:
            break
        batch = list(draw(want))
        if not batch:
            raise RuntimeError(f"draw({want}) returned no groups")
        rounds += 1
        drawn += len(batch)
        if rounds > 1:
            budget -= len(batch)
        for g in batch:
            (kept if is_informative(returns(g), atol) else dropped).append(g)
        missing = n_groups - len(kept)
        if missing <= 0:
            break
        rate = len(kept) / drawn
        want = min(budget, max(1, math.ceil(missing / max(rate, 0.1))))
    extra = drawn - min(drawn, n_groups)
    short = max(0, n_groups - len(kept))
    groups = kept[:n_groups]
    if short and when_short == "pad":
        groups += dropped[::-1][:short]
    metrics = {
        "dynamic_sampling/dropped_groups": len(dropped),
        "dynamic_sampling/extra_groups": extra,
        "dynamic_sampling/extra_rollouts": extra * group_size,
        "dynamic_sampling/rounds": rounds,
        "dynamic_sampling/short": short,
        "dynamic_sampling/informative_fraction": len(kept) / max(drawn, 1),
    }
    return DynamicSamplingResult(groups, metrics)
