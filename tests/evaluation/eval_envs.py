"""Env factories for the evaluation tests (top-level so worker processes can unpickle them)."""

from __future__ import annotations

import os

from agentrl.envs.sokoban import SokobanEnv

SMALL = {"dim_room": 5, "num_boxes": 1, "open_room": True, "search_depth": 1, "max_steps": 10}


class DyingSokoban(SokobanEnv):
    """Sokoban whose worker process exits on the action ``"die"``."""

    def step(self, action: str):
        if action == "die":
            os._exit(3)
        return super().step(action)


def dying() -> DyingSokoban:
    return DyingSokoban(**SMALL)
