"""Finished episodes -> a credit step batch and the learner's step sequences (same row order)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from agentrl.credit import StepBatch

from ..learner.sequences import StepSequence
from .loop import EpisodeResult

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
    (``ActionFormat.step_extras``; HiPER's ``switch``, ``subgoal``, ``switch_span``).
    """
    cols: dict[str, list] = {
        k: []
        for k in (
            "group",
            "traj",
            "t",
            "reward",
            "done",
            "state_key",
            "action_key",
            "valid",
            "milestone",
            "success",
        )
    }
    obs, term, finish, nxt = [], [], [], []
    fmt_cols: dict[str, list] = {k: [] for ep in episodes for s in ep.steps for k in s.extras}
    seqs: list[StepSequence] = []
    for ep in episodes:
        T = len(ep.steps)
        for t, s in enumerate(ep.steps):
            row = len(seqs)
            cols["group"].append(ep.group)
            cols["traj"].append(ep.traj)
            cols["t"].append(t)
            cols["reward"].append(s.reward)
            cols["done"].append(t == T - 1)
            cols["state_key"].append(s.state_key)
            cols["action_key"].append(
                s.action if s.action is not None else f"<invalid:{s.parse_error}>"
            )
            cols["valid"].append(s.valid)
            cols["milestone"].append(s.milestones_new)
            cols["success"].append(ep.won)
            obs.append(s.observation)
            term.append(ep.terminated and t == T - 1)
            finish.append(s.finish_reason)
            nxt.append(s.next_state_key)
            for k, col in fmt_cols.items():
                col.append(s.extras.get(k))
            seqs.append(StepSequence(s.prompt_ids, s.response_ids, s.logprobs, row, s.allowed))
    batch = StepBatch(
        group=np.asarray(cols["group"], dtype=np.int64),
        traj=np.asarray(cols["traj"], dtype=np.int64),
        t=np.asarray(cols["t"], dtype=np.int64),
        reward=np.asarray(cols["reward"], dtype=np.float64),
        done=np.asarray(cols["done"], dtype=bool),
        state_key=cols["state_key"],
        action_key=cols["action_key"],
        valid=np.asarray(cols["valid"], dtype=bool),
        milestone=np.asarray(cols["milestone"], dtype=np.int64),
        success=np.asarray(cols["success"], dtype=bool),
        value=values,
        embedding=embeddings,
        extras={
            "observation": np.array(obs, dtype=object),
            "terminated": np.asarray(term, dtype=bool),
            "finish_reason": np.array(finish, dtype=object),
            "next_state_key": _objects(nxt),
            **{k: _column(v) for k, v in fmt_cols.items()},
        },
    )
    return batch, seqs
