"""MARS: per-agent normalised turn-level returns (Yuan et al., 2025, arXiv:2510.15414).

"MARS: Reinforcing Multi-Agent Reasoning of LLMs through Self-Play in Strategic Games"; code:
thu-nics/MARS, built on ROLL.

Each agent's trajectory is its own (one agent's turns of a self-play game). With r^k_t the
reward of agent k's turn t (``reward``; the invalid-action penalty subtracted on invalid turns):

    turn-level return       R^k_t = sum_{t' >= t} gamma^(t' - t) r^k_{t'}
    agent-specific norm.    A^k_t = (R^k_t - mean(R^k)) / (std(R^k) + eps)

where mean and std run over every turn of agent k (its role: ``extras["agent"]``) in the batch,
separately per game (``extras["category"]``, the reference's grouping by env tag). So each turn
gets the return from that turn on (credit within the episode), and each role is normalised with
its own statistics (a first mover that wins more often does not shift the second mover's
baseline). ``mode="mean"`` only centres; ``scope="group"`` takes the statistics within the task
group of the role instead of the batch (a GRPO-style variant, not MARS).

Defaults follow the paper and the reference's self-play configs: gamma 1 (``AgenticConfig.gamma``),
``mode="mean_std"`` (the paper's per-agent BatchNorm), unbiased std, eps 1e-6.

Differences from the reference code (``roll/utils/functionals.py``, the self-play YAMLs), named:

- Per turn, not per token: the reference puts each turn's score on its last token and takes a
  REINFORCE return over the tokens of the agent's whole dialogue; with gamma 1 that gives every
  token of turn t the sum of the turn scores from t on, which is R_t here. Token-level effects of
  its extra steps (below) that depend on response lengths are not reproduced.
- The reference also (i) centres the turn scores per player before the return
  (``reward_normalization: mean``, ``separate_norm_for_selfplay``; offered as
  ``reward_norm="mean"``), (ii) whitens the token rewards over the whole batch
  (``whiten_rewards``), (iii) centres the advantages per player by the mean of their *distinct*
  values (``advantage_norm: mean``, ``normalize_unique_values_by_player``), and (iv) whitens the
  advantages over the batch's tokens (``whiten_advantages``). Here the paper's formula replaces
  (ii)-(iv): one mean/std normalisation per agent over its turns.
- The reference recognises players from a ``_p<k>`` suffix of the group id and assumes two;
  here any number of agents, named by ``extras["agent"]``.
- ``invalid_penalty`` (default 0) is added to the turn's reward before the return, as the
  reference's format penalty is a turn score.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from .batch import StepBatch, factorize
from .checks import UNIT, check_value
from .diagnostics import episode_diagnostics, group_diagnostics
from .ops import EPS, Mode, check_choice, combine_codes, normalize
from .registry import CreditResult, register

__all__ = ["agent_cells", "mars"]

Scope = Literal["batch", "group"]


def agent_cells(batch: StepBatch, scope: Scope = "batch") -> tuple[np.ndarray, int]:
    """Codes of the cells MARS normalises within: (game, agent) over the batch, or
    (task group, agent) with ``scope="group"``. Without ``extras["agent"]`` every row is one
    agent; without ``extras["category"]`` every row is one game."""
    n = len(batch)
    agent = batch.extras.get("agent")
    agent_codes, n_agents = factorize(agent) if agent is not None else (np.zeros(n, np.int64), 1)
    if scope == "group":
        return combine_codes((batch.group_index, batch.num_groups), (agent_codes, n_agents))
    cat = batch.extras.get("category")
    cat_codes, n_cats = factorize(cat) if cat is not None else (np.zeros(n, np.int64), 1)
    return combine_codes((cat_codes, n_cats), (agent_codes, n_agents))


@register("mars", needs={"agent", "category"}, groups=lambda o: o["scope"] == "group")
def mars(
    batch: StepBatch,
    *,
    gamma: float = 1.0,
    mode: Mode = "mean_std",
    scope: Scope = "batch",
    reward_norm: Literal["none", "mean"] = "none",
    invalid_penalty: float = 0.0,
    eps: float = EPS,
) -> CreditResult:
    """MARS: per-agent normalised turn-level returns."""
    check_choice("mode", mode, ("mean", "mean_std"))
    check_choice("scope", scope, ("batch", "group"))
    check_choice("reward_norm", reward_norm, ("none", "mean"))
    check_value("gamma", gamma, UNIT)
    codes, n = agent_cells(batch, scope)
    r = batch.reward - invalid_penalty * (~batch.valid) if invalid_penalty else batch.reward
    if reward_norm == "mean":  # the reference's per-player centring of the turn scores
        r = normalize(np.asarray(r, dtype=np.float64), codes, n, "mean", singleton="zero")
    R = batch.discounted_returns(gamma, r)
    adv = normalize(R, codes, n, mode, ddof=1, eps=eps, singleton="zero")
    diag = episode_diagnostics(batch)
    diag.update(group_diagnostics(batch, "agent", codes, n, R))
    return CreditResult(adv, diag, {"step": adv, "returns": R})
