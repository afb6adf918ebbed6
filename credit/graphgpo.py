"""GraphGPO: distance-to-success on the rollouts' state graph (Cheng et al., ICML 2026).

Per task group, the rollouts' steps form a directed graph over canonical states: an edge from a
step's state (``state_key``) to the state of the next step; the last step of a successful rollout
points to the group's ``SUCCESS`` node instead. Reverse shortest paths (unit edge costs, BFS) from
``SUCCESS`` give d(s); a state that cannot reach it gets (largest finite d in the group) + 1.

- Raw step return: success_reward * omega^d(next state) (``convention="reference"``, the released
  recipe), or success_reward * omega^(d(next state) + 1) (``"paper"``, its Eq. 4 with unit cost).
- Step term: GiGPO's step normalisation of the raw returns within anchor-state groups (same task
  group, same source state; ``mode``, unbiased std; a group of one gets 0). A task group without a
  successful rollout has no ``SUCCESS`` node and gets a step term of 0.
- A = A^E + step_weight * A^S with A^E GiGPO's episode term (GRPO over step rows, same ``mode``).

Defaults: omega 0.1, success_reward 10, step_weight 1, mode ``mean_std``, invalid_penalty 0.1 on
the episode score (the recipe's episode return is 10 * success - 0.1 * invalid steps; here the
episode return is the sum of the ``reward`` column, minus the penalty on invalid rows).

Inputs: ``success`` (required). The last step of a failed rollout leads to
``extras["next_state_key"]`` when the batch has it (so failed rollouts ending in the same state
share a node), else to a terminal node of its own (unreachable). Our reading of the method comes
from the paper summary and a public third-party reproduction, not the authors' code.

Cost: one vectorised BFS over the whole batch (each level one pass over the edges; levels <= the
longest shortest path), linear in the steps times the graph depth.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from .batch import StepBatch, factorize
from .checks import OPTION_RANGES, check_value
from .diagnostics import episode_diagnostics, group_diagnostics
from .grpo import Stats, episode_advantages
from .ops import EPS, Mode, check_choice, combine_codes, normalize
from .registry import CreditResult, register

__all__ = ["graphgpo", "success_distances"]

HOW = (
    "fill StepBatch(success=...) with whether each row's rollout succeeded (info['won'] at its end)"
)


def success_distances(batch: StepBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: d(the step's next state), whether its task group has a success, d(its state).

    Nodes: the states (task group, state key), one SUCCESS node per task group, and the final
    states of failed rollouts.
    """
    succ = batch.require("success", HOW)
    n = len(batch)
    G = batch.num_groups
    nxt = batch.next_row
    last = nxt < 0
    win_last = last & succ
    fail_last = np.flatnonzero(last & ~succ)
    next_keys = batch.extras.get("next_state_key")
    if next_keys is None:
        src, n_state = batch.anchor_index, batch.num_anchors
        fail_node = n_state + np.arange(len(fail_last))
        n_state += len(fail_last)
    else:
        # Final states of failed rollouts share nodes with equal states of the same task group.
        keys = np.concatenate([batch.state_key, np.asarray(next_keys, dtype=object)[fail_last]])
        groups = np.concatenate([batch.group_index, batch.group_index[fail_last]])
        kc, nk = factorize(keys)
        codes, n_state = combine_codes((groups, G), (kc, nk))
        src, fail_node = codes[:n], codes[n:]
    success_node = n_state + np.arange(G)
    n_nodes = n_state + G
    target = np.empty(n, dtype=np.int64)
    target[~last] = src[nxt[~last]]
    target[win_last] = success_node[batch.group_index[win_last]]
    target[fail_last] = fail_node
    edge = np.unique(src * n_nodes + target)
    e_src, e_dst = edge // n_nodes, edge % n_nodes
    has_success = np.zeros(G, dtype=bool)
    has_success[batch.group_index[win_last]] = True
    # Multi-source reverse BFS from every task group's SUCCESS node (groups are disconnected).
    dist = np.full(n_nodes, np.inf)
    frontier = np.zeros(n_nodes, dtype=bool)
    frontier[success_node[has_success]] = True
    dist[frontier] = 0.0
    level = 0.0
    while frontier.any():
        level += 1.0
        hit = frontier[e_dst] & np.isinf(dist[e_src])
        frontier = np.zeros(n_nodes, dtype=bool)
        frontier[e_src[hit]] = True
        dist[frontier] = level
    # Unreachable: the largest finite distance in the node's task group, plus one.
    node_group = np.empty(n_nodes, dtype=np.int64)
    node_group[src] = batch.group_index
    node_group[target] = batch.group_index
    node_group[success_node] = np.arange(G)
    max_fin = np.zeros(G)
    fin = np.isfinite(dist)
    np.maximum.at(max_fin, node_group[fin], dist[fin])
    dist = np.where(fin, dist, max_fin[node_group] + 1.0)
    return dist[target], has_success[batch.group_index], dist[src]


@register("graphgpo", needs={"next_state_key"}, groups=True)
def graphgpo(
    batch: StepBatch,
    *,
    omega: float = 0.1,
    success_reward: float = 10.0,
    step_weight: float = 1.0,
    mode: Mode = "mean_std",
    convention: Literal["reference", "paper"] = "reference",
    episode_stats: Stats = "per_step_rows",
    invalid_penalty: float = 0.1,
    eps: float = EPS,
) -> CreditResult:
    """GraphGPO: GiGPO's episode term plus normalised distance-to-success step returns."""
    check_choice("mode", mode, ("mean", "mean_std"))
    check_choice("convention", convention, ("reference", "paper"))
    check_value("omega", omega, OPTION_RANGES["graphgpo"]["omega"])
    d_next, group_has_success, d_src = success_distances(batch)
    exponent = d_next + (1.0 if convention == "paper" else 0.0)
    raw = np.where(group_has_success, success_reward * np.power(omega, exponent), 0.0)
    A_S = normalize(
        raw, batch.anchor_index, batch.num_anchors, mode, ddof=1, eps=eps, singleton="zero"
    )
    A_S = np.where(group_has_success, A_S, 0.0)
    A_E = episode_advantages(
        batch, mode, episode_stats, eps, "raw", invalid_penalty=invalid_penalty
    )
    diag = episode_diagnostics(batch)
    diag.update(group_diagnostics(batch, "step", batch.anchor_index, batch.num_anchors, raw))
    diag["groups_with_success"] = float(
        np.mean(
            np.bincount(batch.group_index, weights=group_has_success, minlength=batch.num_groups)
            > 0
        )
    )
    diag["mean_distance_to_success"] = (
        float(d_src[group_has_success].mean()) if group_has_success.any() else 0.0
    )
    return CreditResult(
        A_E + step_weight * A_S, diag, {"episode": A_E, "step": A_S, "graph_return": raw}
    )
