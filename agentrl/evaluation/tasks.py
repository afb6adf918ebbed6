"""Fixed, reproducible evaluation task lists.

An evaluation set is a list of :class:`EvalTask`: which task each episode plays (``task_id``,
from ``env.task_ids(split, limit)``, or ``None`` for envs that list no ids and are reset by seed
alone), the seed its env is reset with, and the seed of the agent's own randomness. The list and
its seeds depend only on the configuration, and both are saved with the results.

:func:`make_tasks` is the one way evaluation lists are built: ``python -m agentrl.evaluate`` and
the trainer's held-out evaluation both call it, and :func:`eval_resets` turns a list into the
reset specs of :class:`agentrl.rollout.runner.EpisodeRunner`. Its two rules:

- a split that lists fewer tasks than requested is an error (naming ``env.eval_split`` and
  ``env.eval_episodes``), never a silently smaller evaluation set;
- every task, task-id tasks included, is reset with a seed (so an env that draws randomness
  after ``reset`` replays exactly); task-id tasks get ``derive_seed(seed, k)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from agentrl import envs

from ..pool import ResetSpec

__all__ = ["EvalTask", "derive_seed", "eval_resets", "make_tasks"]


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
    list_task_ids: Callable[[str, int | None], Sequence[str]] | None = None,
) -> list[EvalTask]:
    """The evaluation list, in a fixed order.

    Tasks come from, in order of precedence: an explicit ``task_ids`` list; ``split`` (the first
    ``episodes`` ids of ``env.task_ids(split, episodes)``); or, when both are ``None``, seeds
    ``seed_base + i`` for ``i < episodes`` (envs that list no task ids). Each task is played
    ``repeats`` times. Episode ``k``'s env is reset with ``seed_base + i`` in the seed-only case
    and with ``derive_seed(seed, k)`` otherwise; its agent seed is always ``derive_seed(seed, k)``.
    A split's ids come from ``list_task_ids(split, episodes)`` when given (the trainer asks an env
    of its pool), else from an env made here; fewer than ``episodes`` of them is an error.
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
        ids = [str(t) for t in (list_task_ids or _probe_task_ids(env, kwargs))(split, episodes)]
        if episodes is not None and len(ids) < episodes:
            raise ValueError(
                f"{env} split {split!r} lists {len(ids)} tasks, fewer than the {episodes} requested "
                "(env.eval_split / env.eval_episodes; split= / episodes= for agentrl.evaluate)"
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


def _probe_task_ids(env: str, kwargs: Mapping[str, Any]) -> Callable[[str, int | None], list]:
    """``task_ids`` of a throwaway env made in this process."""

    def list_ids(split: str, limit: int | None) -> list:
        probe = envs.make(env, **kwargs)
        try:
            return list(probe.task_ids(split, limit))
        finally:
            probe.close()

    return list_ids


def eval_resets(tasks: Sequence[EvalTask]) -> list[ResetSpec]:
    """The reset specs that play ``tasks`` in order: group ``k`` is task ``k``, reset with the
    task's seed and, for task-id tasks, ``options={"task_id": ...}``."""
    return [ResetSpec(t.index, seed=t.reset_args()[0], options=t.reset_args()[1]) for t in tasks]
