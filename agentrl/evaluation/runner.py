"""Play an evaluation list with an agent, episodes in parallel through the env pool.

``play_tasks(env, tasks, agent)`` plays the list through the one episode loop
(:func:`agentrl.episodes.play_episodes`, the loop training uses) with up to ``num_envs``
episodes live at once; each step asks the agent for one action per live episode (one batch: one
model call, one round of HTTP requests) and steps those envs together in the pool's workers. A
finished episode's env is reset with the next task. Records come back in task order, and each
episode depends only on its task and seeds, never on how episodes were scheduled, so a rerun
gives identical records.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..episodes import Episode, EpisodeResult, Move, ResetError, Turn, play_episodes
from ..pool import EnvPool, EnvSpec, make_pool
from .records import EpisodeRecord
from .tasks import EvalTask, eval_resets

__all__ = ["Action", "Agent", "Episode", "EvaluationError", "Turn", "play_tasks"]


@dataclass(frozen=True)
class Action:
    """What an agent answers for one episode: the ``text`` sent to the env, the model's raw
    ``response`` (if any), and whether an action could be ``parsed`` from it (an unparsed
    step counts as invalid whatever the env says)."""

    text: str
    response: str | None = None
    parsed: bool = True


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


class _AgentPolicy:
    """An :class:`Agent` as the episode loop's policy; a failing agent stops the run with
    :class:`EvaluationError`, carrying the records ``played()`` so far."""

    def __init__(self, agent: Agent, pool: EnvPool, env: str, played: Callable[[], list]):
        self.agent, self.pool, self.env, self.played = agent, pool, env, played

    def start(self, episodes: Sequence[Episode]) -> None:
        for ep in episodes:
            ep.rng = np.random.default_rng(ep.task.agent_seed)

    def act(self, episodes: Sequence[Episode], step: int, first_request: int | None) -> list[Move]:
        name = self.agent.name
        try:
            actions = self.agent.act(episodes, self.pool)
        except Exception as exc:
            raise EvaluationError(
                f"agent {name!r} failed on {self.env}: {type(exc).__name__}: {exc}", self.played()
            ) from exc
        if len(actions) != len(episodes):
            raise EvaluationError(
                f"agent {name!r} returned {len(actions)} actions for {len(episodes)} episodes",
                self.played(),
            )
        moves = []
        for a in actions:
            a = a if isinstance(a, Action) else Action(str(a))
            response = a.response if a.response is not None else a.text
            moves.append(Move(a.text, a.text if a.parsed else None, response))
        return moves


def _record(env: str, ep: Episode) -> EpisodeRecord:
    """The record of a finished episode: outcome from its last info, counts from its history
    (an unparsed step is invalid whatever the env says; a non-finite reward is left out)."""
    info, task = ep.info, ep.task
    return EpisodeRecord(
        env=env,
        task_id=str(info.get("task_id", task.task_id if task.task_id is not None else "")),
        category=str(info.get("category", "default")),
        won=bool(info.get("won", False)),
        score=float(info.get("score", 0.0)),
        steps=ep.steps,
        invalid_actions=sum(
            t.action is None or not t.info.get("action_valid", True) for t in ep.history
        ),
        truncated=not ep.result.terminated,
        total_reward=sum((t.reward for t in ep.history if math.isfinite(t.reward)), 0.0),
        seed=task.seed,
        agent_seed=task.agent_seed,
        error=info.get("error"),
    )


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
    on_result: Callable[[int, EpisodeResult], None] | None = None,
) -> list[EpisodeRecord]:
    """Play every task once; returns one :class:`EpisodeRecord` per task, in task order;
    ``on_result(task index, episode)`` gets each finished episode step by step (traces).

    Envs are ``envs.make(env, **env_kwargs)``, or ``env_fn()`` when given (a picklable factory,
    for envs outside the registry). ``max_steps`` caps each episode (it ends as truncated), on
    top of the env's own cap. ``total_reward`` sums the env's rewards (as the trainer's rollout
    records them: the invalid-action penalty is a training term of the credit module, not part
    of the return; a non-finite env reward is left out). An exception from the agent (e.g. an
    unreachable endpoint) or a task that cannot start stops the run with
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
    if not tasks:
        return []
    n_slots = min(num_envs, len(tasks))
    spec = env_fn if env_fn is not None else EnvSpec(env, dict(env_kwargs or {}))
    bar, bar_task = _progress(len(tasks), progress, f"{agent.name} on {env}")
    pool = make_pool(
        [spec] * n_slots,
        num_workers=min(num_workers, n_slots),
        mp_context=mp_context,
        step_timeout=step_timeout,
        **dict(pool_options or {}),
    )
    records: dict[int, EpisodeRecord] = {}

    def played() -> list[EpisodeRecord]:
        return [records[k] for k in sorted(records)]

    def finish(ep: Episode) -> None:
        rec = records[ep.task.index] = _record(env, ep)
        if on_result is not None and ep.result is not None:
            on_result(ep.task.index, ep.result)
        if on_episode is not None:
            on_episode(rec)
        if bar is not None:
            wins = sum(r.won for r in records.values())
            bar.update(bar_task, advance=1, status=f"success {wins}/{len(records)}")

    try:
        if bar is not None:
            bar.start()
        play_episodes(
            pool,
            _AgentPolicy(agent, pool, env, played),
            eval_resets(tasks),
            tasks=tasks,
            width=n_slots,
            max_steps=max_steps,
            on_finish=finish,
        )
    except ResetError as exc:
        names = ", ".join(
            t.task_id if t.task_id is not None else f"seed {t.seed}" for t in exc.tasks
        )
        raise EvaluationError(f"{env}: could not start task(s) {names}: {exc}", played()) from exc
    finally:
        if bar is not None:
            bar.stop()
        pool.close()
    return played()
