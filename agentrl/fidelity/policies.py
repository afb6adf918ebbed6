"""Fixed stochastic policies over a tabular MDP: uniform, and softmax with fixed preferences."""

from __future__ import annotations

import numpy as np

from .mdp import TabularMDP, distance_to_win

__all__ = ["preference_logits", "softmax_policy", "uniform_policy"]


def softmax_policy(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Row-wise softmax of ``logits`` over the admissible actions (probability 0 elsewhere)."""
    z = np.where(mask, logits, -np.inf)
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def uniform_policy(mdp: TabularMDP) -> np.ndarray:
    """Every admissible action equally likely."""
    return mdp.mask / mdp.mask.sum(axis=1, keepdims=True)


def preference_logits(
    mdp: TabularMDP, rng: np.random.Generator, progress_bonus: float = 1.0, noise: float = 1.0
) -> np.ndarray:
    """Fixed preferences: ``progress_bonus`` for an action that brings a win closer, plus noise.

    An action makes progress when it wins now or leads to a state with a shorter distance to a
    win (:func:`distance_to_win`). The Gaussian noise (scale ``noise``, drawn once from ``rng``)
    gives every state its own arbitrary tastes, so the policy is informed but far from optimal.
    """
    d = distance_to_win(mdp)
    progress = mdp.won | (~mdp.done & (d[mdp.next_state] < d[:, None]))
    return progress_bonus * progress + noise * rng.standard_normal(mdp.mask.shape)
