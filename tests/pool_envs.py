"""Env factories for the pool tests (top-level so worker processes can unpickle them)."""

from __future__ import annotations

import os
import time

from agentrl.envs.sokoban import SokobanEnv


class FragileSokoban(SokobanEnv):
    """Sokoban that kills its process on "die", raises on "raise", and sleeps on "sleep"."""

    def step(self, action: str):
        if action == "die":
            os._exit(3)
        if action == "raise":
            raise RuntimeError("boom")
        if action == "sleep":
            time.sleep(30)
        return super().step(action)


def fragile() -> FragileSokoban:
    return FragileSokoban()
