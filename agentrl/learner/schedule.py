"""Learning-rate schedules: the factor that multiplies the base learning rate per update.

An *update* is one call of :meth:`Learner.update` (one training iteration: all its PPO epochs
and mini-batches share one learning rate), so a schedule is stated in iterations and a resumed
run continues it exactly. ``warmup`` iterations ramp linearly from ``1 / (warmup + 1)`` to 1; then
``constant`` keeps 1, ``linear`` and ``cosine`` decay from 1 to ``min_ratio`` at ``total``
iterations (and stay there after it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["SCHEDULES", "LRSchedule", "lr_factor"]

SCHEDULES = ("constant", "linear", "cosine")


def lr_factor(
    update: int,
    schedule: str = "constant",
    *,
    warmup: int = 0,
    total: int | None = None,
    min_ratio: float = 0.0,
) -> float:
    """The learning-rate multiplier of update ``update`` (0-based)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"lr schedule must be one of {SCHEDULES}, got {schedule!r}")
    if update < 0 or warmup < 0:
        raise ValueError(f"update and warmup must be >= 0, got {update} and {warmup}")
    if not 0.0 <= min_ratio <= 1.0:
        raise ValueError(f"lr min_ratio must lie in [0, 1], got {min_ratio}")
    if update < warmup:
        return (update + 1) / (warmup + 1)
    if schedule == "constant":
        return 1.0
    if total is None or total <= warmup:
        raise ValueError(f"a {schedule} lr schedule needs total > warmup, got total={total}")
    progress = min(1.0, (update - warmup) / (total - warmup))
    linear = schedule == "linear"
    shape = 1.0 - progress if linear else 0.5 * (1.0 + math.cos(math.pi * progress))
    return min_ratio + (1.0 - min_ratio) * shape


@dataclass(frozen=True)
class LRSchedule:
    """A schedule in updates (iterations); checked when made. ``total`` is required by
    ``linear`` / ``cosine`` (the trainer passes its iteration count)."""

    schedule: str = "constant"
    warmup: int = 0
    total: int | None = None
    min_ratio: float = 0.0

    def __post_init__(self) -> None:
        self.factor(0)  # a bad schedule fails here, before any rollout

    @property
    def is_constant(self) -> bool:
        return self.schedule == "constant" and self.warmup == 0

    def factor(self, update: int) -> float:
        return lr_factor(
            update, self.schedule, warmup=self.warmup, total=self.total, min_ratio=self.min_ratio
        )
