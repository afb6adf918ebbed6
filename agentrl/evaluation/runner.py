"""Play an evaluation list with an agent, episodes in parallel through the env pool.

``play_tasks(env, tasks, agent)`` keeps up to ``num_envs`` episodes live at once; each
iteration asks the agent for one action per live episode (one batch: one model call, one round
of HTTP requests) and steps those envs together in the pool's workers. A finished episode's env
is reset with the next task. Records come back in task order, and each episode depends only on
its task and seeds, never on how episodes were scheduled, so a rerun gives identical records.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..pool import EnvPool, EnvSpec, make_pool
from .records import EpisodeRecord
from .tasks import EvalTask

__all__ = ["Action", "Agent", "Episode", "EvaluationError", "Turn", "play_tasks"]


@dataclass(frozen=True)
class Action:
    """What an agent answers for one episode: the ``text`` sent to the env, the model's raw
    ``response`` (if any), and whether an action could be ``parsed`` from it (an unparsed
    step counts as invalid whatever the env says)."""

    text: str
    response: str | None = None
    parsed: bool = True


@dataclass(frozen=True)
class Turn:
    """One past step of an episode: the observation acted on, the action, the resulting info."""

    observation: str
    action: str
    response: str | None
    info: Mapping[str, Any]
    reward: float


@dataclass
class Episode:
    """A live episode as agents see it."""

    task: EvalTask
    slot: int
    observation: str
    info: dict[str, Any]
    rng: np.random.Generator
    history: list[Turn] = field(default_factory=list)
    steps: int = 0
    invalid: int = 0
    total_reward: float = 0.0
    first_info: dict[str, Any] = field(default_factory=dict)

    @property
    def instruction(self) -> str:
        return str(self.first_info.get("instruction", self.info.get("instruction", "")))

    @property
    def admissible_actions(self) -> list[str] | None:
        return self.info.get("admissible_actions")


@runtime_checkable
class Agent(Protocol):
    """An evaluation agent: one action per live episode, in the order given."""

    name: str

    def act(self, episodes: Sequence[Episode], pool: EnvPool) -> list[Action | str]: ...

    def close(self) -> None: ...


class EvaluationError(RuntimeError):
    """An evaluation stopped early; ``records`` holds the episodes finished before it stopped."""

    def __init__(self, message: str, records: list[EpisodeRecord]):
        super().__init__(message)
        self.records = records


def _progress(total: int, enabled: bool, label: str):
    """A rich progress bar, or a no-op when disabled or rich is missing."""
    if enabled:
        try:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[status]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
            )
            return bar, bar.add_task(label, total=total, status="")
        except ImportError:
            pass
    return None, None


def play_tasks(
    env: str,
    tasks: Sequence[EvalTask],
    agent: Agent,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    env_fn: Callable[[], Any] | None = None,
    num_envs: int = 8,
    num_workers: int = 0,
    max_steps: int | None = None,
    step_timeout: float | None = None,
    mp_context: str = "forkserver",
    progress: bool = False,
    on_episode: Callable[[EpisodeRecord], None] | None = None,
    pool_options: Mapping[str, Any] | None = None,
) -> list[EpisodeRecord]:
    """Play every task once; returns one :class:`EpisodeRecord` per task, in task order.

    Envs are ``envs.make(env, **env_kwargs)``, or ``env_fn()`` when given (a picklable factory,
    for envs outside the registry). ``max_steps`` caps each episode (it ends as truncated), on top of the env's own cap.
    ``total_reward`` sums the env's rewards (as the trainer's rollout records them: the
    invalid-action penalty is a training term of the credit module, not part of the return; a
    non-finite env reward is left out). An exception from the agent (e.g. an unreachable endpoint) stops the run with
    :class:`EvaluationError`, which carries the episodes already finished.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    for t in tasks:
        if t.env != env:
            raise ValueError(f"task {t.index} is for env {t.env!r}, not {env!r}")
    tasks = list(tasks)
    n_slots = min(num_envs, len(tasks))
    records: dict[int, EpisodeRecord] = {}
    if not tasks:
        return []
    spec = env_fn if env_fn is not None else EnvSpec(env, dict(env_kwargs or {}))
    bar, bar_task = _progress(len(tasks), progress, f"{agent.name} on {env}")
    pool = make_pool(
        [spec] * n_slots,
        num_workers=min(num_workers, n_slots),
        mp_context=mp_context,
        step_timeout=step_timeout,
        **dict(pool_options or {}),
    )
    live: dict[int, Episode] = {}
    queue = iter(tasks)
    wins = 0

    def done_in_order() -> list[EpisodeRecord]:
        return [records[k] for k in sorted(records)]

    def start(slots: list[int]) -> None:
        starting = []
        for slot in slots:
            task = next(queue, None)
            if task is not None:
                starting.append((slot, task))
        if not starting:
            return
        resets = [t.reset_args() for _, t in starting]
        try:
            results = pool.reset(
                [s for s, _ in starting], [r[0] for r in resets], [r[1] for r in resets]
            )
        except RuntimeError as exc:
            names = ", ".join(
                f"{t.task_id if t.task_id is not None else 'seed ' + str(t.seed)}"
                for _, t in starting
            )
            raise EvaluationError(
                f"{env}: could not start task(s) {names}: {exc}", done_in_order()
            ) from exc
        for (slot, task), (obs, info) in zip(starting, results):
            live[slot] = Episode(
                task,
                slot,
                obs,
                dict(info),
                np.random.default_rng(task.agent_seed),
                first_info=dict(info),
            )

    def finish(ep: Episode, terminated: bool, truncated: bool) -> None:
        nonlocal wins
        info = ep.info
        rec = EpisodeRecord(
            env=env,
            task_id=str(
                info.get("task_id", ep.task.task_id if ep.task.task_id is not None else "")
            ),
            category=str(info.get("category", "default")),
            won=bool(info.get("won", False)),
            score=float(info.get("score", 0.0)),
            steps=ep.steps,
            invalid_actions=ep.invalid,
            truncated=bool(truncated and not terminated),
            total_reward=ep.total_reward,
            seed=ep.task.seed,
            agent_seed=ep.task.agent_seed,
            error=info.get("error"),
        )
        records[ep.task.index] = rec
        wins += rec.won
        if on_episode is not None:
            on_episode(rec)
        if bar is not None:
            bar.update(bar_task, advance=1, status=f"success {wins}/{len(records)}")

    try:
        if bar is not None:
            bar.start()
        start(list(range(n_slots)))
        while live:
            slots = sorted(live)
            episodes = [live[s] for s in slots]
            try:
                actions = agent.act(episodes, pool)
            except Exception as exc:
                raise EvaluationError(
                    f"agent {agent.name!r} failed on {env}: {type(exc).__name__}: {exc}",
                    done_in_order(),
                ) from exc
            if len(actions) != len(episodes):
                raise EvaluationError(
                    f"agent {agent.name!r} returned {len(actions)} actions for "
                    f"{len(episodes)} episodes",
                    done_in_order(),
                )
            actions = [a if isinstance(a, Action) else Action(str(a)) for a in actions]
            results = pool.step(slots, [a.text for a in actions])
            freed = []
            for slot, ep, act, res in zip(slots, episodes, actions, results):
                valid = act.parsed and bool(res.info.get("action_valid", True))
                reward = float(res.reward)
                ep.history.append(Turn(ep.observation, act.text, act.response, res.info, reward))
                ep.steps += 1
                ep.invalid += not valid
                ep.total_reward += reward if math.isfinite(reward) else 0.0
                ep.observation, ep.info = res.observation, dict(res.info)
                capped = max_steps is not None and ep.steps >= max_steps
                if res.terminated or res.truncated or capped or "error" in res.info:
                    finish(ep, res.terminated, True)
                    del live[slot]
                    freed.append(slot)
            start(freed)
    finally:
        if bar is not None:
            bar.stop()
        pool.close()
    return done_in_order()
