"""HiPER's hierarchical advantage estimation, HAE (Peng et al., ICML 2026, arXiv:2602.16165).

The policy writes, per turn, ``<switch>KEEP|SWITCH</switch><subgoal>...</subgoal><action>...</action>``.
A trajectory splits into *segments*: one starts at turn 0 and at every turn whose switch says
SWITCH. A critic with three heads gives, per turn, V_low (after the subgoal is written: the
``value`` column), V_high (before the response, read on segment starts: extra column
``value_high``) and V_term (before the response: extra column ``value_term``). With rewards r
(after the shaping below) and segment k = turns s_k..e_k of duration d_k:

    low level (turn GAE inside a segment, bootstrapping to the high value at the segment's end)
        delta_t = r_t + gamma * V_low(t+1) - V_low(t)            (t < e_k)
        delta_e = r_e + gamma * B_k - V_low(e)                    B_k = V_high(s_{k+1}), 0 if done
        A_low(t) = delta_t + gamma * lam_turn * A_low(t+1)        (reset at every segment end)
    high level (SMDP GAE over segments)
        G_k = sum_{j<d_k} gamma^j r_{s_k+j} + gamma^{d_k} B_k
        A_high(k) = G_k - V_high(s_k) + gamma^{d_k} * lam_seg * A_high(k+1)
    termination (every turn)
        A_term(t) = sum_{j=t..e_k} gamma^(j-t) r_j + gamma^(e_k+1-t) B_k - V_term(t)

Critic targets: ``returns_low = A_low + V_low`` (every turn), ``returns_high = A_high + V_high``
(segment starts), ``returns_term = A_term + V_term``. With ``normalize`` (the paper's runs), each
advantage is standardised over the whole batch (population std, +1e-8): A_low over all turns,
A_high over segment starts that wrote a subgoal, A_term over turns that wrote a switch.

Shaped reward, as the reference code applies it before the estimator:
    r_t = env reward - invalid_penalty * (action invalid)
          + keep_penalty on KEEP turns (``keep_penalty_mode="normalized"``: keep_penalty / T on
            each KEEP turn of a trajectory of T >= 2 turns; ``"fixed"``: keep_penalty per KEEP turn)
          + keep_consistency_penalty on KEEP turns (t >= 1) whose subgoal differs from the previous
            turn's (with ``consistency_requires_both``, only where both turns wrote a subgoal).

Routing (done by the learner, from the response's token spans): ``components["action"]`` goes to
the action span, ``components["subgoal"]`` to the subgoal span on segment starts only (0 on other
turns), ``components["switch"]`` to the switch span on every turn. ``advantages`` is the action
(low-level) advantage, which a learner without span routing puts on the whole response (what the
reference does for a response without an action span).

Inputs: ``value`` (V_low), extras ``switch`` (bool: this turn starts a new segment), optional
``value_high`` (absent: V_low is used, the reference's single-head fallback), ``value_term``
(absent: no termination term, ``switch`` component 0), ``subgoal`` (text per turn, ``None`` where
the response has no subgoal span; needed when ``keep_consistency_penalty != 0``) and
``switch_span`` (bool: the response has a switch span; default all True).

Registration: ``register("hiper", needs=needs, asks=ASKS)`` below. :data:`ASKS` names what HAE asks
of the trainer: the ``hiper`` action format (its prompt hint included), a three-output critic and
the ``hiper`` step hooks (the three values before credit, the span routing in the update); the
trainer's module ``agentrl/methods/hiper.py`` registers the code behind those names.

Defaults are those of the authors' ALFWorld script (``example_scripts/HiPER_trainer/run_alfworld.sh``
of github.com/JonP07/HiPER-agent, with verl's ``algorithm.gamma = lam = 1.0``): gamma 1.0,
lam_turn 1.0, lam_seg 0.95, normalize on, keep_penalty -0.3 (normalized), keep_consistency_penalty
-0.3, bootstrap_truncated on, invalid_penalty 0.1. Their WebShop script uses keep_penalty -3.5 and
bootstrap_truncated off.

Differences from the reference code (``hiper_hae/core_hae.py``), all deliberate:
- Vectorised over trajectories (one numpy pass per time index or segment index) instead of Python
  loops per turn; numerically the same estimator (checked by ``scripts/hiper_parity.py``).
- Values come per turn (the learner reads them at the positions the reference's value masks
  mark) instead of per token; subgoals are compared as span text, the reference compares the
  span's token ids (tags included): equal text tokenised in the same place gives equal ids.
- A truncated trajectory (``done`` False at its last turn) with ``bootstrap_truncated`` bootstraps
  with the value of its own last state (V_low for the low level, V_high of the segment start for
  the high level and the termination term), as the reference does; without it, with 0.
- The termination term is the reference's implemented form (segment return minus V_term); the
  paper's (q_t - beta_t) * (V_high - V_low) form is commented out there and not offered here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .batch import StepBatch, StepBatchError, factorize
from .diagnostics import episode_diagnostics
from .ops import check_choice
from .registry import CreditResult, TrainerAsks, register

__all__ = ["ASKS", "hiper", "needs", "reverse_scan"]

#: What HAE asks of the trainer, by name (``agentrl/methods/hiper.py`` implements the names).
ASKS = TrainerAsks(action_format="hiper", value_outputs=3, steps="hiper")

HOW_VALUE = (
    "HiPER needs a critic: run the learner with the HiPER value heads and fill "
    "StepBatch(value=V_low, extras={'value_high': ..., 'value_term': ...})"
)
HOW_SWITCH = (
    "HiPER needs the per-turn switch decision: use the 'hiper' action format "
    "(<switch>KEEP|SWITCH</switch><subgoal>...</subgoal><action>...</action>), which records it"
)


def needs(opts: dict[str, Any]) -> set[str]:
    """The step-batch inputs HAE reads with these options (for ``register(..., needs=needs)``)."""
    cols = {"value", "switch", "value_high", "value_term", "switch_span"}
    return cols | ({"subgoal"} if opts.get("keep_consistency_penalty") else set())


def reverse_scan(mat: np.ndarray, x: np.ndarray, factor: np.ndarray) -> np.ndarray:
    """Per element c of each row of ``mat``: y_c = x_c + factor_c * y_{c+1} (0 past the row's end).

    ``mat`` holds indices into ``x``/``factor`` in order along each row, -1 as padding; the result
    is indexed like ``x`` (entries ``mat`` does not name are 0). One numpy operation per column.
    """
    mask = mat >= 0
    idx = np.where(mask, mat, 0)
    X = np.where(mask, x[idx], 0.0)
    F = np.where(mask, factor[idx], 0.0)
    acc = np.zeros(mat.shape[0])
    out = np.empty(mat.shape)
    with np.errstate(over="ignore", invalid="ignore"):
        for col in range(mat.shape[1] - 1, -1, -1):
            acc = X[:, col] + F[:, col] * acc
            out[:, col] = acc
    result = np.zeros(len(x))
    result[mat[mask]] = out[mask]
    return result


def _float_extra(batch: StepBatch, name: str) -> np.ndarray | None:
    col = batch.extras.get(name)
    if col is None:
        return None
    try:
        arr = np.asarray(col, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise StepBatchError(f"extra column {name!r} must hold numbers: {exc}") from exc
    bad = ~np.isfinite(arr)
    if bad.any():
        raise StepBatchError(
            f"extra column {name!r} has NaN or infinite values at rows "
            f"{np.flatnonzero(bad)[:10].tolist()}"
        )
    return arr


def _bool_extra(batch: StepBatch, name: str, how: str | None) -> np.ndarray | None:
    col = batch.extras.get(name)
    if col is None:
        if how is not None:
            raise StepBatchError(f"this credit module needs the step-batch column {name!r}; {how}")
        return None
    arr = np.asarray(col)
    if arr.dtype.kind != "b":
        if arr.dtype.kind not in "iuf" or not np.isin(arr, (0, 1)).all():
            raise StepBatchError(f"extra column {name!r} must hold booleans, got dtype {arr.dtype}")
        arr = arr.astype(bool)
    return arr


def _standardize(x: np.ndarray, over: np.ndarray) -> np.ndarray:
    """(x - mean) / (std + 1e-8) with mean and population std over the rows ``over``."""
    if not over.any():
        return x
    sel = x[over]
    mean = sel.mean()
    dev = sel - mean
    scale = float(np.abs(dev).max())  # scaled first: squares of huge rewards would overflow
    std = scale * np.sqrt(np.mean((dev / scale) ** 2)) if scale > 0 else 0.0
    return (x - mean) / (std + 1e-8)


def shaped_reward(
    batch: StepBatch,
    switch: np.ndarray,
    *,
    invalid_penalty: float,
    keep_penalty: float,
    keep_penalty_mode: str,
    keep_consistency_penalty: float,
    consistency_requires_both: bool,
) -> np.ndarray:
    """The reward HAE runs on: env reward plus the invalid, KEEP and subgoal-consistency terms."""
    r = batch.reward.astype(np.float64, copy=True)
    keep = ~switch
    if keep_penalty:
        if keep_penalty_mode == "fixed":
            r += keep_penalty * keep
        else:  # normalized: keep_penalty * (KEEP fraction) spread evenly over the KEEP turns
            T = batch.traj_length[batch.traj_index].astype(np.float64)
            r += np.where(keep & (T > 1), keep_penalty / T, 0.0)
    if invalid_penalty:
        r -= invalid_penalty * (~batch.valid)
    if keep_consistency_penalty:
        sub = batch.require(
            "subgoal",
            "record each turn's subgoal text (the 'hiper' action format does), or set "
            "keep_consistency_penalty=0",
        )
        prev = batch.prev_row
        p0 = np.maximum(prev, 0)
        missing = np.fromiter((s is None for s in sub), dtype=bool, count=len(batch))
        codes = factorize(np.asarray(sub, dtype=object))[0]
        both = ~missing & ~missing[p0]
        differ = codes != codes[p0]
        candidate = keep & (prev >= 0)
        hit = candidate & both & differ
        if not consistency_requires_both:
            hit |= candidate & ~both
        r += keep_consistency_penalty * hit
    return r


@register("hiper", needs=needs, asks=ASKS)
def hiper(
    batch: StepBatch,
    *,
    gamma: float = 1.0,
    lam_turn: float = 1.0,
    lam_seg: float = 0.95,
    normalize: bool = True,
    keep_penalty: float = -0.3,
    keep_penalty_mode: str = "normalized",
    keep_consistency_penalty: float = -0.3,
    consistency_requires_both: bool = True,
    bootstrap_truncated: bool = True,
    invalid_penalty: float = 0.1,
) -> CreditResult:
    """HAE: per-turn action (low), subgoal (high, on segment starts) and switch advantages."""
    for name, v in (("gamma", gamma), ("lam_turn", lam_turn), ("lam_seg", lam_seg)):
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"option {name!r} must lie in [0, 1], got {v}")
    check_choice("keep_penalty_mode", keep_penalty_mode, ("normalized", "fixed"))
    v_low = batch.require("value", HOW_VALUE)
    switch = _bool_extra(batch, "switch", HOW_SWITCH)
    v_high = _float_extra(batch, "value_high")
    v_term = _float_extra(batch, "value_term")
    switch_span = _bool_extra(batch, "switch_span", None)
    has_high = v_high is not None
    if v_high is None:
        v_high = v_low
    r = shaped_reward(
        batch,
        switch,
        invalid_penalty=invalid_penalty,
        keep_penalty=keep_penalty,
        keep_penalty_mode=keep_penalty_mode,
        keep_consistency_penalty=keep_consistency_penalty,
        consistency_requires_both=consistency_requires_both,
    )

    n = len(batch)
    nxt = batch.next_row
    start = (batch.t == 0) | switch  # segment starts
    seg_end = (nxt < 0) | start[np.maximum(nxt, 0)]
    # segment index within the trajectory, and each row's segment start row
    seg_k = (batch.forward_cumsum(start.astype(np.float64)) - 1).astype(np.int64)
    n_seg = np.zeros(batch.num_trajectories, dtype=np.int64)
    np.maximum.at(n_seg, batch.traj_index, seg_k + 1)
    seg_mat = np.full((batch.num_trajectories, int(n_seg.max())), -1, dtype=np.int64)
    starts = np.flatnonzero(start)
    seg_mat[batch.traj_index[starts], seg_k[starts]] = starts
    start_row = seg_mat[batch.traj_index, seg_k]

    # bootstrap at each segment's end row: the next segment's high value, else the truncation rule
    cont = ~batch.done
    has_next = nxt >= 0
    nxt0 = np.maximum(nxt, 0)
    trunc = bootstrap_truncated & ~has_next & cont
    boot_high = np.where(has_next, v_high[nxt0], np.where(trunc, v_high[start_row], 0.0))
    boot_low = np.where(has_next, v_high[nxt0], np.where(trunc, v_low, 0.0))
    boot_high = np.where(cont, boot_high, 0.0)
    boot_low = np.where(cont, boot_low, 0.0)

    mat = batch.step_matrix
    with np.errstate(over="ignore", invalid="ignore"):
        # low level: GAE within each segment
        v_next = np.where(seg_end, boot_low, v_low[nxt0])
        delta = r + gamma * v_next - v_low
        adv_low = reverse_scan(mat, delta, np.where(seg_end, 0.0, gamma * lam_turn))
        # discounted return to the segment's end plus the discounted boundary value
        ret_term = reverse_scan(
            mat, r + np.where(seg_end, gamma * boot_high, 0.0), np.where(seg_end, 0.0, gamma)
        )
        # high level: SMDP GAE over segments (values indexed by each segment's start row)
        dur = np.bincount(start_row, minlength=n).astype(np.float64)
        ends_done = np.zeros(n, dtype=bool)
        ends_done[start_row[seg_end]] = batch.done[seg_end]
        delta_seg = ret_term - v_high
        f_seg = np.where(ends_done, 0.0, np.power(gamma, dur) * lam_seg)
        # shift: A_k = delta_k + f_k * A_{k+1}, scanning along seg_mat's columns
        adv_high = reverse_scan(seg_mat, np.where(start, delta_seg, 0.0), f_seg)
    returns_low = adv_low + v_low
    returns_high = np.where(start, adv_high + v_high, 0.0)
    if v_term is not None:
        adv_term = ret_term - v_term
        returns_term = ret_term
    else:
        adv_term = np.zeros(n)
        returns_term = np.zeros(n)

    if normalize:
        adv_low = _standardize(adv_low, np.ones(n, dtype=bool))
        sub = batch.extras.get("subgoal")
        wrote = (
            np.ones(n, dtype=bool)
            if sub is None
            else np.fromiter((s is not None for s in sub), dtype=bool, count=n)
        )
        adv_high = _standardize(adv_high, start & wrote)
        if v_term is not None:
            adv_term = _standardize(
                adv_term, np.ones(n, dtype=bool) if switch_span is None else switch_span
            )
    adv_high = np.where(start, adv_high, 0.0)

    diag: dict[str, Any] = episode_diagnostics(batch)
    diag["segments_per_trajectory"] = float(n_seg.mean())
    diag["segment_length_mean"] = float(n / max(len(starts), 1))
    diag["switch_rate"] = float(switch.mean())
    diag["value_heads"] = 1 + int(has_high) + int(v_term is not None)
    components = {
        "action": adv_low,
        "subgoal": adv_high,
        "switch": adv_term,
        "returns": returns_low,
        "returns_low": returns_low,
        "returns_high": returns_high,
        "returns_term": returns_term,
        "segment_start": start.astype(np.float64),
        "shaped_reward": r,
    }
    return CreditResult(adv_low, diag, components)
