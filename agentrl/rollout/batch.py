"""Finished episodes -> a credit step batch and the learner's step sequences (same row order)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from agentrl.credit import StepBatch
from agentrl.credit.batch import COLUMNS

from ..episodes import EpisodeResult, StepRecord, agent_views
from ..learner.sequences import StepSequence

__all__ = ["to_step_batch"]


def _objects(values: list) -> np.ndarray:
    """A 1-d object array (np.array would make a 2-d one from equal-length tuple keys)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _column(values: list) -> np.ndarray:
    """An action format's step column: booleans stay a bool array, anything else objects."""
    if values and all(isinstance(v, bool) for v in values):
        return np.asarray(values, dtype=bool)
    return _objects(values)


def _row(ep: EpisodeResult, t: int, s: StepRecord) -> dict[str, Any]:
    """The step-batch columns that step ``t`` of ``ep`` fills (the critic's come separately)."""
    return {
        "group": ep.group,
        "traj": ep.traj,
        "t": t,
        "reward": s.reward,
        "done": t == len(ep.steps) - 1,
        "state_key": s.state_key,
        "action_key": s.action if s.action is not None else f"<invalid:{s.parse_error}>",
        "valid": s.valid,
        "milestone": s.milestones_new,
        "success": ep.won,
    }


def _extras_row(ep: EpisodeResult, t: int, s: StepRecord) -> dict[str, Any]:
    """The rollout's own extra columns of step ``t`` of ``ep`` (the action format's aside)."""
    return {
        "observation": s.observation,
        "terminated": ep.terminated and t == len(ep.steps) - 1,
        "finish_reason": s.finish_reason,
        "next_state_key": s.next_state_key,
        "agent": ep.agent if ep.agent is not None else "",
        "category": ep.category,
    }


#: How the rollout's extra columns are stored (the declared columns convert themselves).
_EXTRA_ARRAYS = {
    "observation": _objects,
    "terminated": lambda v: np.asarray(v, dtype=bool),
    "finish_reason": _objects,
    "next_state_key": _objects,
    "agent": _objects,
    "category": _objects,
}


def to_step_batch(
    episodes: Sequence[EpisodeResult],
    values: np.ndarray | None = None,
    embeddings: np.ndarray | None = None,
) -> tuple[StepBatch, list[StepSequence]]:
    """Row ``r`` of the batch and ``seqs[r]`` are the same agent step.

    Columns: ``reward`` is the env's raw reward (credit modules apply the invalid-action
    penalty through their ``invalid_penalty`` option); ``action_key`` is the parsed action, or
    ``"<invalid:reason>"``; ``extras`` carry the ``observation`` text, ``terminated``, the
    sampling ``finish_reason`` and ``next_state_key`` (the state each step led to; GraphGPO links
    failed rollouts' final states through it), plus the action format's step columns
    (``ActionFormat.step_extras``; HiPER's ``switch``, ``subgoal``, ``switch_span``). Each
    column's dtype and checks are the step batch's declaration (:data:`agentrl.credit.batch.COLUMNS`).

    Multi-agent episodes enter as one trajectory per agent (:func:`agentrl.episodes.agent_views`):
    each agent's own steps, rewards and outcome, in a group of its role (so group baselines and
    anchor states stay within a role); ``extras["agent"]`` names the agent (``""`` in single-agent
    episodes) and ``extras["category"]`` the episode's category (the game).
    """
    position = {id(s): k for k, s in enumerate(s for ep in episodes for s in ep.steps)}
    episodes = agent_views(episodes)
    rows = [(ep, t, s) for ep in episodes for t, s in enumerate(ep.steps)]
    order = np.fromiter((position[id(s)] for _, _, s in rows), dtype=np.int64, count=len(rows))
    if (order != np.arange(len(rows))).any():  # the per-step inputs follow the rows
        values = None if values is None else np.asarray(values)[order]
        embeddings = None if embeddings is None else np.asarray(embeddings)[order]
    cols: dict[str, Any] = {c.name: [] for c in COLUMNS}
    extras: dict[str, list] = {k: [] for k in _EXTRA_ARRAYS}
    for ep, t, s in rows:
        for k, v in _row(ep, t, s).items():
            cols[k].append(v)
        for k, v in _extras_row(ep, t, s).items():
            extras[k].append(v)
    cols["value"], cols["embedding"] = values, embeddings
    fmt_keys = dict.fromkeys(k for _, _, s in rows for k in s.extras)
    batch = StepBatch(
        **cols,
        extras={
            **{k: _EXTRA_ARRAYS[k](v) for k, v in extras.items()},
            **{k: _column([s.extras.get(k) for _, _, s in rows]) for k in fmt_keys},
        },
    )
    seqs = [
        StepSequence(
            s.prompt_ids,
            s.response_ids,
            s.logprobs,
            row,
            s.allowed,
            s.versions(),
        )  # fmt: skip
        for row, (_, _, s) in enumerate(rows)
    ]
    return batch, seqs
