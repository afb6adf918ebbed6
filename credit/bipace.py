"""BiPACE: behavioural clusters and action-conditioned baselines (Zhao et al., 2026; [paper + reconstruction]).

GiGPO's exact-state groups are too fine (many singletons, no step signal) and their single mean is
too coarse (it mixes the value of the state with the credit of the action). BiPACE fixes both:

- State side (BiGPO): cluster the steps of each task group by the cosine distance of the actor's
  own hidden state at the step (``embedding``, e.g. layer -8 at the last prompt token; the learner
  supplies it). Greedy leader clustering with radius ``eps_radius``: visiting steps in (traj id, t)
  order, a step joins the first leader whose cosine distance to it is <= the radius, otherwise it
  becomes a leader.
- Action side (PACE, the Q-style estimate): within a cluster C, with G the discounted return-to-go,
  A^S_{i,t} = mean(G of the steps in C that took the same canonical action, ``action_key``)
              - mean_C(G),
  a non-parametric Q(s, a) - V(s). With fewer than ``min_peers`` same-action steps (counting
  itself) the step falls back to the leave-one-out baseline G_{i,t} - mean(G of the others in C);
  a cluster of one gets 0. ``action_baseline=False`` gives plain BiGPO: G - mean_C(G).
- ``mode="mean_std"`` divides A^S by the cluster's std of G (+ eps), as GiGPO does.
- A = A^E + omega * A^S with GiGPO's episode term (GRPO over step rows, same ``mode``).

The released code was not available to us; the choices above follow the abstract and exist as
options. Defaults: eps_radius 0.05 (not given in the abstract; tune it with the reported
``cluster_singleton_fraction``), min_peers 2, gamma 0.95, omega 1, mode ``mean_std``,
invalid_penalty 0.

Cost: the clustering is the expensive part. Per task group, distances are computed by matrix
products against blocks of leader candidates (BLAS), so the work is about
steps x clusters x embedding dim; float32 embeddings stay float32.
"""

from __future__ import annotations

import numpy as np

from .batch import StepBatch
from .checks import OPTION_RANGES, UNIT, check_value
from .diagnostics import episode_diagnostics, group_diagnostics
from .grpo import Stats, episode_advantages
from .ops import EPS, Mode, check_choice, combine_codes, deviations, segment_std
from .registry import CreditResult, register

__all__ = ["bipace", "leader_clusters"]

HOW = (
    "set the learner to return per-step hidden states (the actor's layer -8 at the last prompt "
    "token) and pass them as StepBatch(embedding=<(n, d) array>)"
)


def _leaders_one_group(X: np.ndarray, norms: np.ndarray, radius: float) -> np.ndarray:
    """Greedy leader clustering of the rows of X (already in visiting order); cluster ids 0..k-1.

    The sequential rule (a row joins the first earlier leader within the radius, else leads) is
    evaluated block by block: the first B unassigned rows are the next leader candidates, their
    similarities to every unassigned row come from one matrix product, and the candidates are
    then resolved in order. B adapts to how many candidates turn out to be leaders. Assigned rows
    are dropped from the working copy once they are half of it, so the products shrink with it.
    """
    m = len(X)
    label = np.full(m, -1, dtype=np.int64)
    thresh = 1.0 - radius
    k = 0
    block = 8
    work, work_norm = X, norms  # rows still in play (a view at first, compacted copies later)
    idx = np.arange(m)  # row of X for each row of `work`
    while True:
        live = np.flatnonzero(label[idx] < 0)  # positions in `work` still unassigned
        if not len(live):
            return label
        if 2 * len(live) < len(idx):
            work, work_norm, idx = work[live], work_norm[live], idx[live]
            live = np.arange(len(idx))
        cand = live[:block]
        sims = work @ work[cand].T  # at most twice the unassigned rows: no copy of them
        if len(live) < len(idx):
            sims = sims[live]
        sims /= work_norm[live, None] * work_norm[None, cand]
        close = sims >= thresh
        taken = np.zeros(len(live), dtype=bool)
        leaders = 0
        for ci in range(len(cand)):
            if taken[ci]:
                continue  # claimed by an earlier leader: not a leader itself
            claim = close[:, ci] & ~taken
            claim[ci] = True  # a leader is in its own cluster (even a zero vector)
            taken |= claim
            label[idx[live[claim]]] = k
            k += 1
            leaders += 1
        block = min(256, block * 2) if leaders * 2 > len(cand) else max(4, block // 2)


def leader_clusters(batch: StepBatch, radius: float) -> tuple[np.ndarray, int]:
    """Per row, its behavioural cluster (codes unique across task groups)."""
    check_value("eps_radius", radius, OPTION_RANGES["bipace"]["eps_radius"])
    emb = batch.require("embedding", HOW)
    X = emb if emb.dtype in (np.float32, np.float64) else emb.astype(np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", X, X))
    norms = np.where(norms > 0, norms, 1)  # a zero vector has similarity 0 to everything
    order = np.lexsort((batch.t, batch.traj, batch.group))
    g_sorted = batch.group[order]
    bounds = np.flatnonzero(np.diff(g_sorted)) + 1
    codes = np.empty(len(batch), dtype=np.int64)
    offset = 0
    for rows in np.split(order, bounds):
        contiguous = rows[-1] - rows[0] == len(rows) - 1 and (
            len(rows) < 2 or bool(np.all(np.diff(rows) == 1))
        )
        Xg = X[rows[0] : rows[-1] + 1] if contiguous else X[rows]  # a view when rows are in order
        lab = _leaders_one_group(Xg, norms[rows], radius)
        codes[rows] = offset + lab
        offset += int(lab.max()) + 1
    return codes, offset


@register("bipace", needs={"embedding"}, groups=True)
def bipace(
    batch: StepBatch,
    *,
    eps_radius: float = 0.05,
    action_baseline: bool = True,
    min_peers: int = 2,
    gamma: float = 0.95,
    omega: float = 1.0,
    mode: Mode = "mean_std",
    episode_stats: Stats = "per_step_rows",
    invalid_penalty: float = 0.0,
    eps: float = EPS,
) -> CreditResult:
    """BiPACE: episode term plus action-conditioned advantages within hidden-state clusters."""
    check_choice("mode", mode, ("mean", "mean_std"))
    check_value("min_peers", min_peers, OPTION_RANGES["bipace"]["min_peers"])
    check_value("gamma", gamma, UNIT)
    codes, n = leader_clusters(batch, eps_radius)
    G = batch.discounted_returns(gamma)
    if invalid_penalty:
        G = G - invalid_penalty * (~batch.valid)
    dev, counts = deviations(G, codes, n)  # G - mean_C(G), exactly 0 in constant clusters
    c = counts[codes].astype(np.float64)
    loo = np.where(c > 1, c / np.maximum(c - 1, 1) * dev, 0.0)  # G - mean of the others
    if action_baseline:
        ca, na = combine_codes((codes, n), (batch.action_index, int(batch.action_index.max()) + 1))
        dev_a, counts_a = deviations(G, ca, na)  # G - Q(s, a)
        q_minus_v = dev - dev_a  # (G - V) - (G - Q) = Q - V
        A_S = np.where(counts_a[ca] >= min_peers, q_minus_v, loo)
    else:
        A_S = dev
    A_S = np.where(c > 1, A_S, 0.0)
    if mode == "mean_std":
        A_S = A_S / (segment_std(G, codes, n)[codes] + eps)
    A_E = episode_advantages(
        batch, mode, episode_stats, eps, "raw", invalid_penalty=invalid_penalty
    )
    diag = episode_diagnostics(batch)
    diag.update(group_diagnostics(batch, "cluster", codes, n, G))
    if batch.num_anchors:
        diag["anchor_singleton_fraction"] = float(
            np.mean(np.bincount(batch.anchor_index)[batch.anchor_index] == 1)
        )
    if action_baseline:
        diag["action_fallback_fraction"] = float(np.mean((c > 1) & (counts_a[ca] < min_peers)))
    return CreditResult(A_E + omega * A_S, diag, {"episode": A_E, "step": A_S})
