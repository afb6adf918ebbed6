"""The small environments of the lab, each drawn as a stacked table of tasks from a seed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .mdp import TabularMDP, stack
from .pickplace import pickplace_tasks
from .sokoban import sokoban_tasks

__all__ = ["ENVS", "EnvConfig", "draw_tasks"]


@dataclass(frozen=True)
class EnvConfig:
    name: str
    description: str
    build: Callable[[list[int]], list[TabularMDP]]


ENVS: dict[str, EnvConfig] = {
    "sokoban": EnvConfig(
        "sokoban",
        "Sokoban 6x6, 1 box, 15 steps (SokobanEnv defaults; rewards -0.1/step, +1/-1 box on/off, +10 solved)",
        lambda seeds: sokoban_tasks(seeds, (6, 6), 1, 15),
    ),
    "sokoban-2box": EnvConfig(
        "sokoban-2box",
        "Sokoban 6x6, 2 boxes, 15 steps (same rewards; a box onto a target is a milestone short of solving)",
        lambda seeds: sokoban_tasks(seeds, (6, 6), 2, 15),
    ),
    "pickplace": EnvConfig(
        "pickplace",
        "ALFWorld-like pick-and-place, 3 receptacles, 15 steps (reward 10 x won)",
        lambda seeds: pickplace_tasks(seeds, 3, 15),
    ),
}


def draw_tasks(env: str, num_tasks: int, rng: np.random.Generator) -> TabularMDP:
    """``num_tasks`` tasks of ``env`` with seeds drawn from ``rng`` (Sokoban: its training range)."""
    if env not in ENVS:
        raise ValueError(f"unknown env {env!r}; valid: {', '.join(ENVS)}")
    seeds = [int(s) for s in rng.choice(1_000_000_000, size=num_tasks, replace=False)]
    return stack(ENVS[env].build(seeds))
