"""TextWorld games (.z8/.ulx made by TextWorld) as agentrl text envs, and offline generation.

The engine (``textworld``, which comes with the ``alfworld`` extra) is imported when an env
starts a game, so ``import agentrl.envs.textworld`` works without it.
"""

from .env import TextWorldEnv, clean_feedback
from .games import MakeSettings, expand_game_files, make_game_file

__all__ = ["MakeSettings", "TextWorldEnv", "clean_feedback", "expand_game_files", "make_game_file"]
