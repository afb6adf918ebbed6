"""Env ids for the env-server tests: the pool tests' fragile Sokoban, and one whose info holds a
set (which JSON cannot carry). ``python -m agentrl.pool.serve --import http_envs`` loads them."""

from __future__ import annotations

from pool_envs import FragileSokoban

from agentrl import envs


class SetInfoSokoban(FragileSokoban):
    """Action "set" answers with an ``info`` holding a set; other actions play Sokoban."""

    def step(self, action: str):
        if action == "set":
            obs, reward, terminated, truncated, info = super().step("up")
            return obs, reward, terminated, truncated, dict(info, tags={"a", "b"})
        return super().step(action)


envs.register("FragileSokoban-v0", FragileSokoban)
envs.register("SetInfoSokoban-v0", SetInfoSokoban)
