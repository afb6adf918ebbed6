"""Sample groups of rollouts as training does: N rollouts per task, all from the task's start.

Rollouts run in lock-step (one numpy operation per time step across every rollout of every
task), so sampling a whole batch costs ``horizon`` vectorised steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentrl.credit import StepBatch

from .mdp import TabularMDP

__all__ = ["Rollouts", "sample_groups", "to_step_batch"]


def rows_in_order(cols: dict[str, list[np.ndarray]]) -> dict[str, np.ndarray]:
    """Per-step columns gathered step by step over live trajectories, concatenated and ordered by
    (trajectory, step): the row order of a step batch."""
    flat = {k: np.concatenate(v) for k, v in cols.items()}
    order = np.lexsort((flat["t"], flat["traj"]))
    return {k: v[order] for k, v in flat.items()}


@dataclass(frozen=True)
class Rollouts:
    """Per-step arrays (ordered by trajectory, then time) and per-trajectory summaries."""

    task: np.ndarray  # (n,) task index = group id
    traj: np.ndarray  # (n,) trajectory id
    t: np.ndarray  # (n,) step index within the trajectory
    state: np.ndarray  # (n,) state index in the MDP table
    next_state: np.ndarray  # (n,) the state the step led to
    action: np.ndarray  # (n,) action index
    reward: np.ndarray  # (n,)
    done: np.ndarray  # (n,) last step of its trajectory (terminal or truncated)
    milestone: np.ndarray  # (n,)
    steps_left: np.ndarray  # (n,) horizon - t: the k of Q_k, V_k
    traj_task: np.ndarray  # (num_traj,)
    traj_return: np.ndarray  # (num_traj,) undiscounted
    traj_won: np.ndarray  # (num_traj,)

    def __len__(self) -> int:
        return len(self.task)

    def discounted_returns(self, gamma: float) -> np.ndarray:
        """Per step, G_t = sum_{j >= t} gamma^(j - t) r_j (backwards over time, vectorised)."""
        mat = np.zeros((len(self.traj_task), int(self.t.max()) + 2))
        mat[self.traj, self.t] = self.reward
        for col in range(mat.shape[1] - 2, -1, -1):
            mat[:, col] += gamma * mat[:, col + 1]
        return mat[self.traj, self.t]


def sample_groups(
    mdp: TabularMDP,
    policy: np.ndarray,
    n: int,
    rng: np.random.Generator,
    tasks: np.ndarray | None = None,
) -> Rollouts:
    """``n`` rollouts of ``policy`` from the start state of each task in ``tasks`` (default all)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    tasks = np.arange(mdp.num_tasks) if tasks is None else np.asarray(tasks, dtype=np.int64)
    traj_task = np.repeat(tasks, n)
    num = len(traj_task)
    state = mdp.start[traj_task].copy()
    alive = np.ones(num, dtype=bool)
    cum = np.cumsum(policy, axis=1)
    cols: dict[str, list[np.ndarray]] = {
        k: [] for k in ("traj", "t", "state", "next_state", "action", "reward", "done", "milestone")
    }
    ret = np.zeros(num)
    won = np.zeros(num, dtype=bool)
    H = mdp.horizon
    for t in range(H):
        idx = np.flatnonzero(alive)
        if len(idx) == 0:
            break
        s = state[idx]
        c = cum[s]
        u = (1.0 - rng.random(len(idx))) * c[:, -1]  # in (0, total]: never picks a zero-mass head
        a = np.argmax(c >= u[:, None], axis=1)
        r = mdp.reward[s, a]
        d = mdp.done[s, a] | (t == H - 1)
        cols["traj"].append(idx)
        cols["t"].append(np.full(len(idx), t))
        cols["state"].append(s)
        cols["next_state"].append(mdp.next_state[s, a])
        cols["action"].append(a)
        cols["reward"].append(r)
        cols["done"].append(d)
        cols["milestone"].append(mdp.milestone[s, a])
        ret[idx] += r
        won[idx] |= mdp.won[s, a]
        state[idx] = mdp.next_state[s, a]
        alive[idx[d]] = False
    flat = rows_in_order(cols)
    return Rollouts(
        task=traj_task[flat["traj"]],
        steps_left=H - flat["t"],
        traj_task=traj_task,
        traj_return=ret,
        traj_won=won,
        **flat,
    )


def to_step_batch(
    rollouts: Rollouts,
    value: np.ndarray | None = None,
    embedding: np.ndarray | None = None,
) -> StepBatch:
    """The credit modules' input: one row per step, groups = tasks.

    ``state_key`` is the state's index in the (stacked) table, unique across tasks; ``action_key``
    the action index; every action is valid (policies only pick admissible commands);
    ``extras["next_state_key"]`` the state each step led to. ``value`` (per step) and
    ``embedding`` (per state, indexed by the step's state) are optional columns.
    """
    return StepBatch(
        group=rollouts.task,
        traj=rollouts.traj,
        t=rollouts.t,
        reward=rollouts.reward,
        done=rollouts.done,
        state_key=rollouts.state,
        action_key=rollouts.action,
        valid=np.ones(len(rollouts), dtype=bool),
        milestone=rollouts.milestone,
        value=value,
        embedding=None if embedding is None else embedding[rollouts.state],
        success=rollouts.traj_won[rollouts.traj],
        extras={"next_state_key": rollouts.next_state},
    )
