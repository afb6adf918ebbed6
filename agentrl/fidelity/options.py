"""A fixed hierarchical (option) policy over a tabular MDP, and its exact values and advantages.

HiPER's policy writes, each turn, a switch decision, a subgoal and an action. The lab models it
as a fixed stochastic option policy over G subgoals. At turn t, in env state s_t with the
subgoal g_{t-1} carried from the previous turn:

1. switch: SWITCH with probability beta(s_t, g_{t-1}), else KEEP (turn 0 always SWITCHes: there is
   no subgoal yet);
2. subgoal: on SWITCH a new g_t ~ mu(. | s_t), on KEEP g_t = g_{t-1};
3. action: a_t ~ pi(. | s_t, g_t); the env steps.

The augmented state (s, g) is enumerable, so the values HiPER's three critic heads stand for
follow exactly by backward induction over the steps left k (as :mod:`.mdp` does for flat
policies; V_0 = 0, the episode is cut at the horizon):

    Q_low(k, s, g, a) = r(s, a) + gamma [not done] U(k-1, s', g)
    V_low(k, s, g)    = sum_a pi(a | s, g) Q_low(k, s, g, a)     value after the subgoal is set
    V_high(k, s)      = sum_g mu(g | s) V_low(k, s, g)            value at a segment start
    U(k, s, g)        = (1 - beta(s, g)) V_low(k, s, g) + beta(s, g) V_high(k, s)
                                                                  value before the switch decision

These are the paper's three heads read where its code reads them: V_low after the subgoal span,
V_high and V_term before the response (V_term's target, the segment return from the turn, has
expectation U: KEEP continues the segment, SWITCH starts a new one). The exact advantage of each
decision of a turn (the truths the lab compares HiPER's three streams with):

    action   A_low(k, s, g, a) = Q_low(k, s, g, a) - V_low(k, s, g)
    subgoal  A_sub(k, s, g)    = V_low(k, s, g) - V_high(k, s)          (segment starts)
    switch   A_sw(k, s, g', b) = Q_sw(b) - U(k, s, g'),  Q_sw(KEEP) = V_low(k, s, g'),
                                                        Q_sw(SWITCH) = V_high(k, s)
             = (q - beta) (V_high - V_low) with q = [b = SWITCH]: the paper's termination
               advantage, exactly; 0 at turn 0, where SWITCH is forced (no decision).

They add up to the advantage of the whole turn's response (switch, subgoal, action) against U:
A_sw + [SWITCH] A_sub + A_low = Q_low - U.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .mdp import TabularMDP

__all__ = [
    "OptionPolicy",
    "OptionValues",
    "Subgoals",
    "distance_to_subgoal",
    "evaluate_options",
    "option_policy",
]


@dataclass(frozen=True, eq=False)
class Subgoals:
    """G subgoals over an MDP's states: ``target[g, s]`` says s achieves subgoal g; ``win[g]``
    says a winning transition achieves it (the last subgoal of a task, which ends the episode)."""

    names: tuple[str, ...]
    target: np.ndarray  # (G, S) bool
    win: np.ndarray  # (G,) bool

    def __post_init__(self) -> None:
        G = len(self.names)
        if self.target.ndim != 2 or self.target.shape[0] != G or self.win.shape != (G,):
            raise ValueError(
                f"subgoal tables must be (G, S) and (G,) with G = {G}, got "
                f"{self.target.shape} and {self.win.shape}"
            )

    @property
    def num(self) -> int:
        return len(self.names)


def stack_subgoals(parts: list[Subgoals]) -> Subgoals:
    """The subgoals of stacked tasks (same names; state axis concatenated as :func:`.mdp.stack`)."""
    first = parts[0]
    for p in parts[1:]:
        if p.names != first.names or not np.array_equal(p.win, first.win):
            raise ValueError("stacked subgoal sets need the same names and win flags")
    return Subgoals(first.names, np.concatenate([p.target for p in parts], axis=1), first.win)


def distance_to_subgoal(mdp: TabularMDP, subgoals: Subgoals) -> np.ndarray:
    """(G, S): fewest steps from each state to achieving each subgoal (0 on its target states,
    ``inf`` where it cannot be achieved within the horizon)."""
    G, S = subgoals.target.shape
    d = np.where(subgoals.target, 0.0, np.inf)
    for _ in range(mdp.horizon):
        nxt = d[:, mdp.next_state]  # (G, S, A)
        step = np.where(mdp.done[None], np.inf, 1.0 + nxt)
        step = np.where(subgoals.win[:, None, None] & mdp.won[None], 1.0, step)
        step = np.where(mdp.mask[None], step, np.inf)
        new = np.where(subgoals.target, 0.0, step.min(axis=2))
        if np.array_equal(new, d):
            break
        d = new
    return d


@dataclass(frozen=True, eq=False)
class OptionPolicy:
    """A fixed option policy (S states, G subgoals, A actions).

    Attributes:
        switch: (S, G) probability of SWITCH in state s while the current subgoal is g.
        subgoal: (S, G) mu(g | s), the subgoal chosen on SWITCH (and at turn 0).
        action: (S, G, A) pi(a | s, g), zero on inadmissible actions.
        names: the G subgoal names (the text of the subgoal span).
    """

    switch: np.ndarray
    subgoal: np.ndarray
    action: np.ndarray
    names: tuple[str, ...]

    def check(self, mdp: TabularMDP) -> OptionPolicy:
        """Shapes, probability rows and admissibility against ``mdp``; returns self."""
        S, A = mdp.mask.shape
        G = len(self.names)
        for name, arr, shape in (
            ("switch", self.switch, (S, G)),
            ("subgoal", self.subgoal, (S, G)),
            ("action", self.action, (S, G, A)),
        ):
            if arr.shape != shape:
                raise ValueError(f"option policy {name!r} must have shape {shape}, got {arr.shape}")
        if ((self.switch < 0) | (self.switch > 1)).any():
            raise ValueError("option policy 'switch' must hold probabilities in [0, 1]")
        for name, arr in (("subgoal", self.subgoal), ("action", self.action)):
            if (arr < 0).any() or np.abs(arr.sum(axis=-1) - 1.0).max() > 1e-9:
                raise ValueError(f"option policy {name!r} rows must be probability distributions")
        if (self.action[~np.broadcast_to(mdp.mask[:, None, :], self.action.shape)] > 0).any():
            raise ValueError("option policy 'action' puts probability on inadmissible actions")
        return self


def _softmax(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    z = np.where(mask, logits, -np.inf)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def option_policy(
    mdp: TabularMDP,
    subgoals: Subgoals,
    rng: np.random.Generator,
    bonus: float = 2.0,
    noise: float = 1.0,
    switch_done: float = 0.8,
    switch_open: float = 0.1,
    manager: str = "softmax",
) -> OptionPolicy:
    """An option policy with fixed preferences: an informed but imperfect worker, and a manager
    that is informed (``manager="softmax"``) or not (``"uniform"``).

    - action: softmax of ``bonus`` x [a brings subgoal g closer] + N(0, noise) per (s, g, a);
    - subgoal: softmax of ``bonus`` x [g is useful in s: some action brings both g and a win
      closer] + N(0, noise) per (s, g); uniform with ``manager="uniform"``;
    - switch: ``switch_done`` where the current subgoal is achieved in s, ``switch_open`` elsewhere;
      the constant 0.3 with ``manager="uniform"``.
    """
    if manager not in ("softmax", "uniform"):
        raise ValueError(f"manager must be 'softmax' or 'uniform', got {manager!r}")
    d_goal = distance_to_subgoal(mdp, subgoals)  # (G, S)
    d_nxt = d_goal[:, mdp.next_state]  # (G, S, A)
    to_goal = (~mdp.done[None] & (d_nxt < d_goal[:, :, None])) | (
        subgoals.win[:, None, None] & mdp.won[None]
    )
    to_goal = np.transpose(to_goal & mdp.mask[None], (1, 0, 2))  # (S, G, A)
    d_win = distance_to_subgoal(
        mdp, Subgoals(("win",), np.zeros((1, mdp.num_states), dtype=bool), np.array([True]))
    )[0]
    to_win = mdp.won | (~mdp.done & (d_win[mdp.next_state] < d_win[:, None]))  # (S, A)
    useful = (to_goal & to_win[:, None, :]).any(axis=2)  # (S, G)
    S, G, A = to_goal.shape
    action = _softmax(
        bonus * to_goal + noise * rng.standard_normal((S, G, A)),
        np.broadcast_to(mdp.mask[:, None, :], (S, G, A)),
    )
    if manager == "uniform":
        subgoal = np.full((S, G), 1.0 / G)
        switch = np.full((S, G), 0.3)
    else:
        subgoal = _softmax(
            bonus * useful + noise * rng.standard_normal((S, G)), np.ones((S, G), dtype=bool)
        )
        switch = np.where(subgoals.target.T, switch_done, switch_open)
    return OptionPolicy(switch, subgoal, action, subgoals.names).check(mdp)


@dataclass(frozen=True, eq=False)
class OptionValues:
    """Exact values of an option policy over (steps left k, state s, subgoal g).

    ``low[k, s, g]`` = V_low, ``high[k, s]`` = V_high, ``term[k, s, g]`` = U (value before the
    switch decision with current subgoal g). Index 0 of k is the end of the horizon (all 0).
    """

    low: np.ndarray  # (H + 1, S, G)
    high: np.ndarray  # (H + 1, S)
    term: np.ndarray  # (H + 1, S, G)
    gamma: float
    reward: np.ndarray  # (S, A), 0 on masked actions
    cont: np.ndarray  # (S, A) gamma * [not done]
    next_state: np.ndarray  # (S, A)

    def q_low(
        self, state: np.ndarray, goal: np.ndarray, action: np.ndarray, steps_left: np.ndarray
    ) -> np.ndarray:
        """Q_low(k, s, g, a) elementwise (k >= 1)."""
        nxt = self.next_state[state, action]
        return (
            self.reward[state, action]
            + self.cont[state, action] * self.term[steps_left - 1, nxt, goal]
        )

    def low_advantage(
        self, state: np.ndarray, goal: np.ndarray, action: np.ndarray, steps_left: np.ndarray
    ) -> np.ndarray:
        """A_low = Q_low(k, s, g, a) - V_low(k, s, g): the action's advantage under its subgoal."""
        return self.q_low(state, goal, action, steps_left) - self.low[steps_left, state, goal]

    def subgoal_advantage(
        self, state: np.ndarray, goal: np.ndarray, steps_left: np.ndarray
    ) -> np.ndarray:
        """A_sub = V_low(k, s, g) - V_high(k, s): choosing subgoal g at a segment start."""
        return self.low[steps_left, state, goal] - self.high[steps_left, state]

    def switch_advantage(
        self,
        state: np.ndarray,
        prev_goal: np.ndarray,
        switched: np.ndarray,
        steps_left: np.ndarray,
    ) -> np.ndarray:
        """A_sw = Q_sw(b) - U(k, s, g'); 0 where ``prev_goal`` < 0 (turn 0: SWITCH is forced)."""
        first = prev_goal < 0
        g = np.maximum(prev_goal, 0)
        q = np.where(switched, self.high[steps_left, state], self.low[steps_left, state, g])
        return np.where(first, 0.0, q - self.term[steps_left, state, g])

    def value_before(
        self, state: np.ndarray, prev_goal: np.ndarray, steps_left: np.ndarray
    ) -> np.ndarray:
        """The value before the turn's response: U(k, s, g'), or V_high(k, s) at turn 0."""
        g = np.maximum(prev_goal, 0)
        return np.where(
            prev_goal < 0, self.high[steps_left, state], self.term[steps_left, state, g]
        )

    @cached_property
    def Q_low(self) -> np.ndarray:
        """The full table Q_low[k, s, g, a] (k = 0 and masked actions: 0)."""
        H = self.low.shape[0] - 1
        Q = np.zeros((H + 1, *self.low.shape[1:], self.reward.shape[1]))
        for k in range(1, H + 1):
            Q[k] = self.reward[:, None, :] + self.cont[:, None, :] * np.transpose(
                self.term[k - 1][self.next_state], (0, 2, 1)
            )
        return Q


def evaluate_options(mdp: TabularMDP, policy: OptionPolicy, gamma: float = 1.0) -> OptionValues:
    """Exact V_low, V_high and U of ``policy`` by backward induction (cost horizon x S x G x A)."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    policy.check(mdp)
    H = mdp.horizon
    S, A = mdp.mask.shape
    G = len(policy.names)
    r = np.where(mdp.mask, mdp.reward, 0.0)
    cont = np.where(mdp.mask & ~mdp.done, gamma, 0.0)
    expected_r = np.einsum("sga,sa->sg", policy.action, r)
    weight = policy.action * cont[:, None, :]  # (S, G, A)
    low = np.zeros((H + 1, S, G))
    high = np.zeros((H + 1, S))
    term = np.zeros((H + 1, S, G))
    beta = policy.switch
    for k in range(1, H + 1):
        u_next = term[k - 1][mdp.next_state]  # (S, A, G): U(k-1, s', g)
        low[k] = expected_r + np.einsum("sga,sag->sg", weight, u_next)
        high[k] = np.einsum("sg,sg->s", policy.subgoal, low[k])
        term[k] = (1.0 - beta) * low[k] + beta * high[k][:, None]
    return OptionValues(low, high, term, gamma, r, cont, mdp.next_state)
