"""Compose training configs in-process (Hydra's compose API) for tests."""

from __future__ import annotations

from pathlib import Path

import agentrl.configs
from hydra import compose, initialize_config_module

CONFIG_DIR = Path(agentrl.configs.__path__[0])

#: A seconds-long run: 2 iterations of 2 tasks x 4 rollouts, 4 evaluation episodes.
SMOKE = ["trainer=smoke", "rollout.tasks_per_iter=2", "rollout.group_size=4", "env.eval_episodes=4"]


def make_cfg(*overrides: str):
    with initialize_config_module("agentrl.configs", version_base=None):
        return compose("train", overrides=list(overrides))


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))
