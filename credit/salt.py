"""SALT: step-level advantages from the group's trajectory graph (Li et al., EACL Findings 2026).

A plug-in on an episode-level base (GRPO by default, or RLOO: ``base={"name": "rloo"}``), using
outcome rewards only. Per task group, the rollouts' steps are merged into a graph whose nodes are
identical steps; a step's advantage becomes the mean of the base advantages of the *distinct*
rollouts passing through its node. A step shared by winning and losing rollouts comes out near
neutral; a step only on winning (losing) paths keeps a positive (negative) value; a step taken by
fewer than ``min_share`` rollouts keeps its own rollout's advantage.

[paper + reconstruction]: the abstract fixes the graph-over-same-prompt-trajectories design and
the outcome-only, plug-in nature; the exact node identity and post-processing are not available
to us, so they are options:

- ``node``: ``"state"`` (group, state_key); ``"state_action"`` (default; + action_key);
  ``"transition"`` (+ the next step's state, or the rollout's end marked won/lost); ``"history"``
  (the whole prefix s_0, a_0, ..., s_t, a_t: a prefix tree, merging only identical pasts).
- ``min_share`` (default 2): rollouts needed at a node before its steps are averaged.
- ``renormalize`` (default off): z-score the resulting step advantages within each task group
  (over step rows), restoring the base's scale after averaging has shrunk it.

Graph statistics (always, numpy): node and edge counts, mean branching (out-degree of nodes with
successors), fraction of steps at shared nodes, and, with ``success``, the fraction of shared
nodes visited by both winning and losing rollouts. :func:`salt_graph` builds the same graph as a
``networkx.DiGraph`` (nodes carry ``rollouts``, ``visits`` and ``value``) for inspection and
further graph analysis; ``graph_stats=True`` adds networkx statistics (weakly connected
components, whether the graph is acyclic) to the diagnostics at a cost of ~0.2 s per 40k steps.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from .batch import StepBatch
from .checks import OPTION_RANGES, check_value
from .compose import run_spec
from .diagnostics import episode_diagnostics
from .ops import EPS, combine_codes, normalize, segment_mean
from .registry import CreditResult, register

__all__ = ["node_codes", "salt", "salt_graph"]

Node = Literal["state", "state_action", "transition", "history"]


def node_codes(batch: StepBatch, node: Node = "state_action") -> tuple[np.ndarray, int]:
    """Per row, its graph node: codes shared by identical steps of the same task group."""
    check_value("node", node, OPTION_RANGES["salt"]["node"])
    anchor = (batch.anchor_index, batch.num_anchors)
    action = (batch.action_index, int(batch.action_index.max()) + 1)
    if node == "state":
        return anchor
    if node == "state_action":
        return combine_codes(anchor, action)
    if node == "transition":
        nxt = batch.next_row
        end = np.where(batch.success if batch.success is not None else False, 1, 0)
        nxt_code = np.where(nxt >= 0, batch.anchor_index[np.maximum(nxt, 0)] + 2, end)
        return combine_codes(anchor, action, (nxt_code, batch.num_anchors + 2))
    # history: prefix codes built one time index at a time (a prefix tree per task group).
    sa, n_sa = combine_codes(anchor, action)
    codes = np.empty(len(batch), dtype=np.int64)
    prev = batch.prev_row
    order = np.argsort(batch.t, kind="stable")
    t_sorted = batch.t[order]
    bounds = np.flatnonzero(np.diff(t_sorted)) + 1
    offset = 0
    for rows in np.split(order, bounds):
        parent = np.where(prev[rows] >= 0, codes[np.maximum(prev[rows], 0)], -1) + 1
        level, k = combine_codes((parent, offset + 1), (sa[rows], n_sa))
        codes[rows] = offset + level
        offset += k
    return codes, offset


def _node_stats(batch: StepBatch, codes: np.ndarray, n: int, base: np.ndarray):
    pair, n_pair = combine_codes((codes, n), (batch.traj_index, batch.num_trajectories))
    pair_value, _ = segment_mean(base, pair, n_pair)
    pair_node = np.empty(n_pair, dtype=np.int64)
    pair_node[pair] = codes
    node_value, rollouts = segment_mean(pair_value, pair_node, n)
    return pair, pair_node, node_value, rollouts


def _edges(batch: StepBatch, codes: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    nxt = batch.next_row
    has = nxt >= 0
    e = np.unique(codes[has] * n + codes[nxt[has]])
    return e // n, e % n


@register("salt", groups=True)
def salt(
    batch: StepBatch,
    *,
    base: Any = "grpo",
    node: Node = "state_action",
    min_share: int = 2,
    renormalize: bool = False,
    graph_stats: bool = False,
    eps: float = EPS,
) -> CreditResult:
    """SALT: each step takes the mean base advantage of the distinct rollouts through its node."""
    check_value("min_share", min_share, OPTION_RANGES["salt"]["min_share"])
    base_res = run_spec(batch, base, "option 'base'")
    A = np.asarray(base_res.advantages, dtype=np.float64)
    codes, n = node_codes(batch, node)
    pair, pair_node, node_value, rollouts = _node_stats(batch, codes, n, A)
    shared = rollouts[codes] >= min_share
    adv = np.where(shared, node_value[codes], A)
    if renormalize:
        adv = normalize(
            adv, batch.group_index, batch.num_groups, "mean_std", ddof=1, eps=eps, singleton="zero"
        )
    diag = episode_diagnostics(batch)
    diag.update(
        {f"base/{k}": v for k, v in base_res.diagnostics.items() if not k.startswith("episode")}
    )
    src, dst = _edges(batch, codes, n)
    out_deg = np.bincount(src, minlength=n)
    diag.update(
        {
            "graph_nodes": int(np.count_nonzero(rollouts)),
            "graph_edges": len(src),
            "graph_branching": float(out_deg[out_deg > 0].mean()) if (out_deg > 0).any() else 0.0,
            "shared_step_fraction": float(np.mean(rollouts[codes] >= 2)),
            "averaged_step_fraction": float(np.mean(shared)),
        }
    )
    if batch.traj_success is not None:
        win = batch.traj_success[batch.traj_index].astype(np.float64)
        wins = segment_mean(win, codes, n)[0]
        multi = rollouts >= 2
        mixed = multi & (wins > 0) & (wins < 1)
        diag["mixed_outcome_node_fraction"] = float(mixed.sum() / max(multi.sum(), 1))
    if graph_stats:
        g = salt_graph(batch, node, A, codes=(codes, n))
        import networkx as nx

        diag["graph_weak_components"] = nx.number_weakly_connected_components(g)
        diag["graph_is_dag"] = bool(nx.is_directed_acyclic_graph(g))
    return CreditResult(adv, diag, {"episode": A, "step": adv - A})


def salt_graph(
    batch: StepBatch,
    node: Node = "state_action",
    base: np.ndarray | None = None,
    codes: tuple[np.ndarray, int] | None = None,
):
    """The trajectory graph as a ``networkx.DiGraph``.

    Nodes are integer codes with attributes ``group`` (task group id), ``rollouts`` (distinct
    rollouts through it), ``visits`` (steps at it) and, given per-row ``base`` advantages,
    ``value`` (their mean over the distinct rollouts); edges join consecutive steps of a rollout.
    """
    import networkx as nx

    c, n = codes if codes is not None else node_codes(batch, node)
    A = np.zeros(len(batch)) if base is None else np.asarray(base, dtype=np.float64)
    _, _, value, rollouts = _node_stats(batch, c, n, A)
    visits = np.bincount(c, minlength=n)
    group = np.empty(n, dtype=np.int64)
    group[c] = batch.group
    g = nx.DiGraph()
    live = np.flatnonzero(visits)
    g.add_nodes_from(
        (
            int(k),
            {
                "group": int(group[k]),
                "rollouts": int(rollouts[k]),
                "visits": int(visits[k]),
                "value": float(value[k]),
            },
        )
        for k in live
    )
    src, dst = _edges(batch, c, n)
    g.add_edges_from(zip(src.tolist(), dst.tolist(), strict=True))
    return g
