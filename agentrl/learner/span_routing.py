"""Per-token routing of several step advantages onto token spans (HiPER's three levels).

HiPER (``credit/hiper.py``) returns per step an ``action``, a ``subgoal`` and a ``switch``
advantage. Each goes to its own tokens of the step's response, as in the authors' trainer:
action span <- action (low level); subgoal span <- subgoal (high level), only on turns that start
a segment; switch span <- switch (termination), every turn. Where spans overlap the advantages
add up. Tokens outside every span (whitespace between tags, a missing span) get no advantage
and are left out of the policy loss (``loss_mask``). A response without an action span gets the
action advantage on all of its tokens (their fallback).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["route_spans"]


def route_spans(
    components: Mapping[str, np.ndarray],
    token_step: np.ndarray,
    masks: Mapping[str, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """Token advantages (float32) and the loss mask from per-step components and span masks.

    ``token_step``: per token position, the step row of its response or -1 (as
    :func:`agentrl.credit.step_to_tokens`). ``masks``: boolean arrays of ``token_step``'s shape
    for ``"action"``, ``"subgoal"`` and ``"switch"``. ``components`` needs ``action``,
    ``subgoal``, ``switch`` and ``segment_start`` (per step, as ``credit/hiper.py`` returns).
    """
    idx = np.asarray(token_step)
    resp = idx >= 0
    rows = np.maximum(idx, 0)
    for k in ("action", "subgoal", "switch"):
        m = masks.get(k)
        if m is None or np.shape(m) != idx.shape:
            raise ValueError(
                f"span mask {k!r} is missing or not shaped like token_step {idx.shape}"
            )
    missing = [k for k in ("action", "subgoal", "switch", "segment_start") if k not in components]
    if missing:
        raise ValueError(f"components lack {missing}: pass CreditResult.components of credit=hiper")
    act = np.asarray(masks["action"], bool) & resp
    # a response with no action span: the action advantage on all of its tokens
    has_act = np.zeros(int(idx.max(initial=-1)) + 1, dtype=bool)
    has_act[idx[act]] = True
    act |= resp & ~has_act[rows]
    start = np.asarray(components["segment_start"])[rows] > 0
    sub = np.asarray(masks["subgoal"], bool) & resp & start
    sw = np.asarray(masks["switch"], bool) & resp
    adv = (
        np.where(act, np.asarray(components["action"])[rows], 0.0)
        + np.where(sub, np.asarray(components["subgoal"])[rows], 0.0)
        + np.where(sw, np.asarray(components["switch"])[rows], 0.0)
    )
    return adv.astype(np.float32), act | sub | sw
