"""One finished episode, as evaluation records it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = ["EpisodeRecord", "record_from_rollout"]


@dataclass(frozen=True)
class EpisodeRecord:
    """The outcome of one episode: what every statistic in a report is computed from.

    - ``env``: the environment name (e.g. ``"Sokoban-v0"``); ``category``: the task's category
      from ``info["category"]``; ``task_id`` and ``seed``: what reset the episode (replayable);
      ``agent_seed``: the seed of the agent's own randomness (sampling, random choices).
    - ``won`` and ``score``: the env's ``info["won"]`` and ``info["score"]`` at the last step.
    - ``steps``: actions taken; ``invalid_actions``: steps whose ``info["action_valid"]`` was
      false (including responses the parser could not read, which the env sees as invalid).
    - ``truncated``: the episode ended without terminating (step cap, or cut by an error).
    - ``total_reward``: the sum of the env's rewards.
    - ``error``: set when the episode was cut by a failure (worker death, env exception,
      unreachable endpoint); such episodes count as not won.
    """

    env: str
    task_id: str
    category: str
    won: bool
    score: float
    steps: int
    invalid_actions: int = 0
    truncated: bool = False
    total_reward: float = 0.0
    seed: int | None = None
    agent_seed: int | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        for name in ("env", "task_id", "category"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(
                    f"EpisodeRecord.{name} must be str, got {type(getattr(self, name)).__name__}"
                )
        if not isinstance(self.won, bool):
            raise TypeError(f"EpisodeRecord.won must be bool, got {type(self.won).__name__}")
        score = float(self.score)
        if not (math.isfinite(score) and 0.0 <= score <= 1.0):
            raise ValueError(
                f"EpisodeRecord.score must lie in [0, 1], got {self.score!r} (task {self.task_id})"
            )
        if self.steps < 0 or self.invalid_actions < 0 or self.invalid_actions > self.steps:
            raise ValueError(
                f"need 0 <= invalid_actions <= steps, got steps={self.steps}, "
                f"invalid_actions={self.invalid_actions} (task {self.task_id})"
            )
        if not math.isfinite(float(self.total_reward)):
            raise ValueError(
                f"EpisodeRecord.total_reward must be finite, got {self.total_reward!r}"
            )
        object.__setattr__(self, "score", score)
        object.__setattr__(self, "total_reward", float(self.total_reward))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EpisodeRecord:
        """Inverse of :meth:`to_dict`; unknown keys are an error (a typo must not vanish)."""
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown EpisodeRecord keys: {sorted(unknown)}")
        return cls(**dict(data))


def record_from_rollout(ep: Any, env: str) -> EpisodeRecord:
    """The record of an :class:`agentrl.rollout.EpisodeResult` (duck-typed, to keep this module
    free of torch): the trainer's held-out evaluation and the ``model`` agent both record their
    episodes with it. ``seed`` is the reset seed, ``agent_seed`` the seed its chunk sampled with."""
    return EpisodeRecord(
        env=env,
        task_id=str(ep.task_id),
        category=str(ep.category or "default"),
        won=bool(ep.won),
        score=float(ep.score),
        steps=len(ep.steps),
        invalid_actions=int(ep.invalid_actions),
        truncated=bool(ep.truncated),
        total_reward=float(ep.total_reward),
        seed=ep.seed,
        agent_seed=ep.sampling_seed,
        error=ep.error,
    )
