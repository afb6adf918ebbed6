"""Turn any Gymnasium env with a discrete action space into an agentrl text env.

You supply a renderer (observation -> text) and names for the actions; the adapter does parsing,
invalid actions, the info contract and a step cap. ``agentrl/FrozenLake-v0`` is built this way.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from .base import TextEnv, make_info
from .commands import command_lower
from .tools import fresh, tool_info
from .tools import tool as tool_fn


class DiscreteTextEnv(TextEnv):
    """Wraps a discrete-action Gymnasium env as a text env.

    Args:
        env: the inner env (its action space must be ``Discrete``).
        action_names: one name per discrete action, matched case-insensitively.
        render_obs: ``(inner_env, obs) -> str`` text shown to the agent.
        instruction: the task in words.
        category: the task category reported in ``info``.
        state_key: ``(inner_env, obs) -> hashable`` true-state identity (default: the obs).
        success: ``(reward, terminated, info) -> bool`` whether the episode is won
            (default: terminated with positive reward).
        expert: optional ``(inner_env, obs) -> action index`` policy for ``expert_action``.
        max_steps: step cap (the episode is truncated after it).
        invalid_penalty: reward of an invalid action (state unchanged, inner env not stepped).
        tool: ``(name, argument, description)`` of the one tool that takes an action name (the
            tool-call action format; reset info): default ``act(action)``.
    """

    def __init__(
        self,
        env: gym.Env,
        action_names: Sequence[str],
        render_obs: Callable[[gym.Env, Any], str],
        instruction: str,
        category: str = "default",
        state_key: Callable[[gym.Env, Any], Hashable] | None = None,
        success: Callable[[float, bool, dict], bool] | None = None,
        expert: Callable[[gym.Env, Any], int] | None = None,
        max_steps: int = 100,
        invalid_penalty: float = 0.0,
        render_mode: str | None = None,
        tool: tuple[str, str, str] = ("act", "action", "Take one action."),
    ):
        super().__init__(render_mode)
        if not isinstance(env.action_space, gym.spaces.Discrete):
            raise TypeError(
                f"DiscreteTextEnv needs a Discrete action space, got {env.action_space}"
            )
        if len(action_names) != env.action_space.n:
            raise ValueError(f"{len(action_names)} action names for {env.action_space.n} actions")
        self.inner = env
        self.action_names = [command_lower(a) for a in action_names]
        self._render_obs = render_obs
        self._state_key = state_key or (lambda _env, obs: _hashable(obs))
        self._success = success or (lambda r, term, _info: bool(term and r > 0))
        self._expert = expert
        self.instruction = instruction
        self.category = category
        self.max_steps = max_steps
        self.invalid_penalty = invalid_penalty
        self._obs: Any = None
        self._won = False
        self._steps = 0
        self._task_id = ""
        name, argument, description = tool
        schema = {"type": "string", "enum": list(self.action_names)}
        self.tools = tool_info(
            [tool_fn(name, description, **{argument: schema})], {name: "{" + argument + "}"}
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        if "task_id" in options:
            seed = int(options.pop("task_id"))
        elif seed is None:
            seed = int(self.np_random.integers(2**31 - 1))
        self._obs, _ = self.inner.reset(seed=seed, options=options or None)
        self._task_id, self._won, self._steps = str(seed), False, 0
        return self.current_observation(), {**self._info(True), **fresh(self.tools)}

    def step(self, action: str):
        self._steps += 1
        name = command_lower(action.strip()) if isinstance(action, str) else None
        if name not in self.action_names:
            truncated = self._steps >= self.max_steps
            return (
                self.current_observation(),
                float(self.invalid_penalty),
                False,
                truncated,
                self._info(False),
            )
        self._obs, reward, terminated, truncated, inner_info = self.inner.step(
            self.action_names.index(name)
        )
        self._won = self._success(float(reward), bool(terminated), inner_info)
        truncated = bool(truncated) or (not terminated and self._steps >= self.max_steps)
        return (
            self.current_observation(),
            float(reward),
            bool(terminated),
            truncated,
            self._info(True),
        )

    def current_observation(self) -> str:
        return self._render_obs(self.inner, self._obs)

    def _info(self, valid: bool) -> dict[str, Any]:
        return make_info(
            instruction=self.instruction,
            task_id=self._task_id,
            category=self.category,
            admissible_actions=list(self.action_names),
            state_key=self._state_key(self.inner, self._obs),
            action_valid=valid,
            won=self._won,
            score=float(self._won),
            milestones=(),
        )

    def expert_action(self) -> str:
        if self._expert is None:
            return super().expert_action()
        return self.action_names[self._expert(self.inner, self._obs)]

    def close(self) -> None:
        self.inner.close()


def _hashable(obs: Any) -> Hashable:
    if isinstance(obs, np.ndarray):
        return obs.tobytes()
    return obs


# -- FrozenLake, the worked example -----------------------------------------------------------

FROZEN_LAKE_ACTIONS = ("left", "down", "right", "up")  # FrozenLake's action order


def _render_frozen_lake(env: gym.Env, obs: int) -> str:
    desc = env.unwrapped.desc
    ncol = desc.shape[1]
    rows = [[c.decode() for c in row] for row in desc]
    r, c = divmod(int(obs), ncol)
    rows[r][c] = "P"
    return "\n".join("".join(row) for row in rows)


def _frozen_lake_expert(env: gym.Env, obs: int) -> int:
    """Shortest path to the goal over frozen cells (BFS); exact on the deterministic lake."""
    desc = env.unwrapped.desc
    nrow, ncol = desc.shape
    goal = next(r * ncol + c for r in range(nrow) for c in range(ncol) if desc[r, c] == b"G")
    moves = ((0, -1), (1, 0), (0, 1), (-1, 0))  # left, down, right, up

    def ok(r: int, c: int) -> bool:
        return 0 <= r < nrow and 0 <= c < ncol and desc[r, c] != b"H"

    first: dict[int, int] = {int(obs): -1}
    frontier = [int(obs)]
    while frontier and goal not in first:
        nxt = []
        for s in frontier:
            r, c = divmod(s, ncol)
            for a, (dr, dc) in enumerate(moves):
                if ok(r + dr, c + dc) and (t := (r + dr) * ncol + c + dc) not in first:
                    first[t] = a if first[s] < 0 else first[s]
                    nxt.append(t)
        frontier = nxt
    return max(first.get(goal, 0), 0)


def make_frozen_lake(
    map_name: str = "4x4", is_slippery: bool = False, max_steps: int = 30, **kwargs: Any
) -> DiscreteTextEnv:
    """``agentrl/FrozenLake-v0``: Gymnasium's FrozenLake through :class:`DiscreteTextEnv`.

    Text: the map with ``S`` start, ``F`` frozen, ``H`` hole, ``G`` goal and ``P`` the player.
    The map of a named size is fixed, so every seed gives the same task.
    """
    inner = gym.make("FrozenLake-v1", map_name=map_name, is_slippery=is_slippery).unwrapped
    return DiscreteTextEnv(
        inner,
        FROZEN_LAKE_ACTIONS,
        _render_frozen_lake,
        instruction="Walk from S to the goal G over frozen cells F without falling into a hole H. "
        "You are P. Actions: left, down, right, up.",
        category=f"frozenlake-{map_name}{'-slippery' if is_slippery else ''}",
        expert=_frozen_lake_expert,
        max_steps=max_steps,
        tool=("move", "direction", "Move one cell."),
        **kwargs,
    )
