"""A three-state MDP small enough to solve by hand (shared by the fidelity tests)."""

import numpy as np

from agentrl.fidelity.mdp import TabularMDP

A, B, C = 0, 1, 2


def three_state(horizon: int = 2) -> TabularMDP:
    """A --a0--> B (r 0), A --a1--> A (r -1); B --a0--> win (r +10, done), B --a1--> A (r 0).

    C is the absorbing win state (never acted from).
    """
    return TabularMDP(
        next_state=np.array([[B, A], [C, A], [C, C]]),
        reward=np.array([[0.0, -1.0], [10.0, 0.0], [0.0, 0.0]]),
        done=np.array([[False, False], [True, False], [True, True]]),
        won=np.array([[False, False], [True, False], [False, False]]),
        milestone=np.zeros((3, 2), dtype=np.int64),
        mask=np.ones((3, 2), dtype=bool),
        start=np.array([A]),
        horizon=horizon,
        state_keys=("A", "B", "C"),
        action_names=("a0", "a1"),
    )
