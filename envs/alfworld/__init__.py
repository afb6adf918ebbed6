"""ALFWorld on the real ``alfworld`` engine: the env, an offline game generator, data loading.

``import agentrl.envs.alfworld`` does not import the engine; it is loaded when an env is created (the
``alfworld`` extra: ``pip install 'agentrl[alfworld]'``).
"""

from .data import GameRef, GeneratedGames, OfficialGames, default_cache_dir
from .engine import GameFileError
from .env import DEFAULT_GENERATED, ALFWorldEnv
from .tasks import SHORT_NAMES, SPLITS, TASK_TYPES, parse_task_types

__all__ = [
    "DEFAULT_GENERATED",
    "SHORT_NAMES",
    "SPLITS",
    "TASK_TYPES",
    "ALFWorldEnv",
    "GameFileError",
    "GameRef",
    "GeneratedGames",
    "OfficialGames",
    "default_cache_dir",
    "parse_task_types",
]
