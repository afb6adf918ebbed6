"""Finite-horizon tabular MDPs and exact policy evaluation by dynamic programming.

A :class:`TabularMDP` holds one or several tasks of a deterministic environment as flat tables
over enumerated states: for every (state, action) the next state, the reward, whether the
episode ends (``done``), whether it ends in success (``won``) and how many milestones the step
reaches. Several tasks are stacked into one table (state indices offset per task), so one
sweep evaluates a whole group batch and state indices are unique across tasks.

The episode of a task starts at ``start[task]`` and runs until a ``done`` transition or
``horizon`` steps, like the environment's own step cap (truncation). The value of a stationary
policy therefore depends on the steps left ``k``:

    Q_k(s, a) = r(s, a) + gamma * [not done(s, a)] * V_{k-1}(s'),    V_0 = 0,
    V_k(s)    = sum_a pi(a | s) Q_k(s, a),
    A_k(s, a) = Q_k(s, a) - V_k(s).

A step taken at time t of an episode has ``k = horizon - t`` steps left.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

__all__ = [
    "PolicyValues",
    "TabularMDP",
    "distance_to_win",
    "evaluate_policy",
    "stack",
    "success_probability",
]


@dataclass(frozen=True, eq=False)
class TabularMDP:
    """Deterministic finite-horizon MDP tables (S states, A actions).

    Attributes:
        next_state: (S, A) next state index.
        reward: (S, A) reward of the transition.
        done: (S, A) the episode ends with this transition.
        won: (S, A) the episode ends in success with this transition (implies ``done``).
        milestone: (S, A) number of milestones newly reached by the transition (>= 0).
        mask: (S, A) admissible actions (a policy gives masked actions probability 0).
        start: (num_tasks,) start state of each task.
        horizon: the step cap of an episode.
        state_keys: (S,) readable canonical key of each state (unique within the table).
        action_names: (A,) names of the actions.
        task_names: (num_tasks,) name of each task.
    """

    next_state: np.ndarray
    reward: np.ndarray
    done: np.ndarray
    won: np.ndarray
    milestone: np.ndarray
    mask: np.ndarray
    start: np.ndarray
    horizon: int
    state_keys: tuple[str, ...]
    action_names: tuple[str, ...]
    task_names: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        S, A = self.next_state.shape
        for name in ("reward", "done", "won", "milestone", "mask"):
            if getattr(self, name).shape != (S, A):
                raise ValueError(
                    f"{name} must have shape {(S, A)}, got {getattr(self, name).shape}"
                )
        if self.horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {self.horizon}")
        if len(self.state_keys) != S or len(self.action_names) != A:
            raise ValueError("state_keys / action_names do not match the table sizes")
        if ((self.next_state < 0) | (self.next_state >= S)).any():
            raise ValueError("next_state holds indices outside the table")
        if (self.won & ~self.done).any():
            raise ValueError("a winning transition must end the episode")
        if not self.mask.any(axis=1).all():
            raise ValueError("every state needs at least one admissible action")
        if not self.task_names:
            object.__setattr__(
                self, "task_names", tuple(f"task{i}" for i in range(len(self.start)))
            )

    @property
    def num_states(self) -> int:
        return self.next_state.shape[0]

    @property
    def num_actions(self) -> int:
        return self.next_state.shape[1]

    @property
    def num_tasks(self) -> int:
        return len(self.start)


def stack(mdps: Sequence[TabularMDP]) -> TabularMDP:
    """One table holding the tasks of all ``mdps`` (same horizon and action set)."""
    if not mdps:
        raise ValueError("nothing to stack")
    first = mdps[0]
    for m in mdps[1:]:
        if m.horizon != first.horizon or m.action_names != first.action_names:
            raise ValueError("stacked MDPs need the same horizon and action names")
    offsets = np.cumsum([0] + [m.num_states for m in mdps[:-1]])
    keys: list[str] = []
    task_names: list[str] = []
    for i, m in enumerate(mdps):
        keys += [f"{i}:{k}" for k in m.state_keys]
        task_names += list(m.task_names)
    return TabularMDP(
        next_state=np.concatenate([m.next_state + off for m, off in zip(mdps, offsets)]),
        reward=np.concatenate([m.reward for m in mdps]),
        done=np.concatenate([m.done for m in mdps]),
        won=np.concatenate([m.won for m in mdps]),
        milestone=np.concatenate([m.milestone for m in mdps]),
        mask=np.concatenate([m.mask for m in mdps]),
        start=np.concatenate([m.start + off for m, off in zip(mdps, offsets)]),
        horizon=first.horizon,
        state_keys=tuple(keys),
        action_names=first.action_names,
        task_names=tuple(task_names),
    )


@dataclass(frozen=True, eq=False)
class PolicyValues:
    """V[k, s] for k = 0..horizon steps left (V[0] = 0); Q follows from V in one step.

    Only V is stored: Q_k(s, a) = r(s, a) + gamma * [not done] * V_{k-1}(s') is cheap to form for
    the sampled steps, and the full (horizon + 1, S, A) table is built only on request (``Q``).
    """

    V: np.ndarray
    gamma: float
    reward: np.ndarray
    cont: np.ndarray  # gamma * [not done], 0 on masked actions
    next_state: np.ndarray

    def q(self, state: np.ndarray, action: np.ndarray, steps_left: np.ndarray) -> np.ndarray:
        """Q_k(s, a) elementwise (k = steps left >= 1)."""
        nxt = self.next_state[state, action]
        return self.reward[state, action] + self.cont[state, action] * self.V[steps_left - 1, nxt]

    def advantage(
        self, state: np.ndarray, action: np.ndarray, steps_left: np.ndarray
    ) -> np.ndarray:
        """A_k(s, a) = Q_k(s, a) - V_k(s) elementwise."""
        return self.q(state, action, steps_left) - self.V[steps_left, state]

    def value(self, state: np.ndarray, steps_left: np.ndarray) -> np.ndarray:
        return self.V[steps_left, state]

    @cached_property
    def Q(self) -> np.ndarray:
        """The full table Q[k, s, a] (Q[0] = 0; masked actions 0)."""
        H = self.V.shape[0] - 1
        Q = np.zeros((H + 1, *self.reward.shape))
        for k in range(1, H + 1):
            Q[k] = self.reward + self.cont * self.V[k - 1][self.next_state]
        return Q


def _check_policy(mdp: TabularMDP, policy: np.ndarray) -> np.ndarray:
    policy = np.asarray(policy, dtype=np.float64)
    if policy.shape != mdp.mask.shape:
        raise ValueError(f"policy must have shape {mdp.mask.shape}, got {policy.shape}")
    if (policy < 0).any() or np.abs(policy.sum(axis=1) - 1.0).max() > 1e-9:
        raise ValueError("policy rows must be probability distributions")
    if (policy[~mdp.mask] > 0).any():
        raise ValueError("policy puts probability on inadmissible actions")
    return policy


def evaluate_policy(
    mdp: TabularMDP, policy: np.ndarray, gamma: float = 1.0, reward: np.ndarray | None = None
) -> PolicyValues:
    """Exact V^pi and Q^pi over (steps left, state) by backward induction.

    ``policy`` is (S, A), rows summing to one. ``reward`` overrides the MDP's reward table (used
    for success probabilities). Cost: horizon x S x A.
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    policy = _check_policy(mdp, policy)
    r = mdp.reward if reward is None else np.asarray(reward, dtype=np.float64)
    H, S = mdp.horizon, mdp.num_states
    r = np.where(mdp.mask, r, 0.0)
    cont = np.where(mdp.mask & ~mdp.done, gamma, 0.0)  # masked actions: Q = 0, no mass anyway
    # V_k = sum_a pi (r + cont V_{k-1}[next]) = expected reward + (pi * cont) . V_{k-1}[next]
    expected_reward = np.einsum("sa,sa->s", policy, r)
    weight = policy * cont
    V = np.zeros((H + 1, S))
    for k in range(1, H + 1):
        V[k] = expected_reward + np.einsum("sa,sa->s", weight, V[k - 1][mdp.next_state])
    return PolicyValues(V, gamma, r, cont, mdp.next_state)


def success_probability(mdp: TabularMDP, policy: np.ndarray) -> np.ndarray:
    """Per task, the exact probability that ``policy`` wins within the horizon."""
    values = evaluate_policy(mdp, policy, gamma=1.0, reward=mdp.won.astype(np.float64))
    return values.V[mdp.horizon, mdp.start]


def distance_to_win(mdp: TabularMDP) -> np.ndarray:
    """Per state, the fewest steps to a winning transition (``inf`` where none within the horizon)."""
    d = np.full(mdp.num_states, np.inf)
    for _ in range(mdp.horizon):
        step = np.where(mdp.won, 1.0, np.where(mdp.done, np.inf, 1.0 + d[mdp.next_state]))
        step[~mdp.mask] = np.inf
        new = step.min(axis=1)
        if np.array_equal(new, d):
            break
        d = new
    return d
