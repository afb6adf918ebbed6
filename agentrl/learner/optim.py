"""The optimiser, built in one place from ``trainer.optimizer`` (AdamW unless the config names
another ``torch.optim.Optimizer`` class), and the learning-rate schedule applied to it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..config import ConfigError, LearnerConfig, check

__all__ = ["build_optimizer", "scale_learning_rates"]


def build_optimizer(cfg: LearnerConfig, groups: Sequence[dict[str, Any]]) -> torch.optim.Optimizer:
    """The configured optimiser over parameter ``groups`` (each with its ``lr``). A config made in
    Python (not by :func:`agentrl.config.load_config`) gets the same checks here: an unknown class
    or option raises :class:`ConfigError` naming the ``trainer.optimizer`` key."""
    problems = list(check(cfg.optimizer, "trainer.optimizer."))
    if problems:
        raise ConfigError("invalid config: " + "; ".join(problems))
    return cfg.optimizer.resolve()(list(groups), lr=cfg.lr, **cfg.optimizer.options())


def scale_learning_rates(optimizer: torch.optim.Optimizer, factor: float) -> None:
    """Set every group's rate to its base rate times ``factor``. The base rate travels in the
    optimiser state (``initial_lr``, as torch's schedulers keep it), so a resumed run scales the
    same base."""
    for group in optimizer.param_groups:
        group["lr"] = group.setdefault("initial_lr", group["lr"]) * factor
