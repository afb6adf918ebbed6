"""Fixed, reproducible evaluation task lists.

An evaluation set is a list of :class:`EvalTask`: which task each episode plays (``task_id``,
from ``env.task_ids(split, limit)``, or ``None`` for envs that list no ids and are reset by seed
alone), the seed its env is reset with, and the seed of the agent's own randomness. The list and
its seeds depend only on the configuration, and both are saved with the results.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["EvalTask", "derive_seed", "make_tasks"]


@dataclass(frozen=True)
class EvalTask:
    """One evaluation episode: its ``index`` in the list, env name, task and seeds."""

    index: int
    env: str
    task_id: str | None
    seed: int
    agent_seed: int

    def reset_args(self) -> tuple[int, dict[str, Any] | None]:
        """``(seed, options)`` for ``env.reset``."""
        return self.seed, ({"task_id": self.task_id} if self.task_id is not None else None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def derive_seed(base: int, index: int) -> int:
    """A 32-bit seed for episode ``index`` of a run seeded with ``base`` (numpy SeedSequence:
    well-mixed, platform-independent, and independent of how episodes are scheduled)."""
    return int(np.random.SeedSequence([int(base) & 0xFFFFFFFF, int(index)]).generate_state(1)[0])


def make_tasks(
    env: str,
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    split: str | None = None,
    episodes: int | None = None,
    task_ids: Sequence[str] | None = None,
    seed_base: int | None = None,
    seed: int = 0,
    repeats: int = 1,
) -> list[EvalTask]:
    """The evaluation list, in a fixed order.

    Tasks come from, in order of precedence: an explicit ``task_ids`` list; ``split`` (the first
    ``episodes`` ids of ``env.task_ids(split, episodes)``); or, when both are ``None``, seeds
    ``seed_base + i`` for ``i < episodes`` (envs that list no task ids). Each task is played
    ``repeats`` times. Episode ``k``'s env is reset with ``seed_base + i`` in the seed-only case
    and with ``derive_seed(seed, k)`` otherwise; its agent seed is always ``derive_seed(seed, k)``.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if episodes is not None and episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    kwargs = dict(env_kwargs or {})
    ids: list[str | None]
    reset_seeds: list[int | None]
    if task_ids is not None:
        ids = [str(t) for t in task_ids]
        if episodes is not None:
            ids = ids[:episodes]
        reset_seeds = [None] * len(ids)
    elif split is not None:
        from agentrl import envs

        probe = envs.make(env, **kwargs)
        try:
            ids = [str(t) for t in probe.task_ids(split, episodes)]
        finally:
            probe.close()
        if episodes is not None and len(ids) < episodes:
            raise ValueError(
                f"{env} split {split!r} has {len(ids)} tasks, fewer than episodes={episodes}"
            )
        reset_seeds = [None] * len(ids)
    else:
        if episodes is None or seed_base is None:
            raise ValueError(
                "without a split or task ids, give episodes and seed_base (tasks are reset by seed)"
            )
        ids = [None] * episodes
        reset_seeds = [int(seed_base) + i for i in range(episodes)]
    if not ids:
        raise ValueError(f"the evaluation list for {env} is empty")
    out = []
    for k in range(len(ids) * repeats):
        i = k // repeats
        agent_seed = derive_seed(seed, k)
        reset_seed = reset_seeds[i] if reset_seeds[i] is not None else agent_seed
        out.append(EvalTask(k, env, ids[i], reset_seed, agent_seed))
    return out
