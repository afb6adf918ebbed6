"""HiPER (``credit=hiper``) in the training recipe: spans, the three-head critic, routing.

With ``credit=hiper`` the runner writes responses in :class:`~agentrl.rollout.spans.HiperFormat`
(switch, subgoal, action; the prompt carries the current subgoal), and the step batch records
``switch``, ``subgoal`` and ``switch_span`` per step. Then, as in the authors' trainer
(github.com/JonP07/HiPER-agent: ``hiper_hae/hier_mask.py``, ``core_hae.compute_value_mask``,
``verl/workers/critic/dp_critic.py``):

- :func:`span_layout`: each response's tokens are decoded one by one (their character offsets),
  the spans found in that text give per-token masks, and V_low's position is the first token
  after ``</subgoal>`` (else after ``</switch>``, else the first token);
- :func:`prepare`: the critic, ``Linear(hidden, 3)`` on the policy's final hidden state, gives
  V_low at that position (the state before it: the last token of ``</subgoal>``) and V_high and
  V_term at the last prompt token; they fill ``value``, ``value_high`` and ``value_term``;
- :func:`update_kwargs`: each level's advantage on its span (:func:`route_spans`; tokens outside
  every span leave the policy loss) and the three heads' targets: V_low on every turn, V_high on
  segment starts, V_term on every turn (coefficients 1, the reference's).

Difference: the reference's critic is a separate model; here the heads sit on the policy's
hidden state (the trainer's value head for every critic-based module), trained with
``trainer.value_coef``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import distributed as D
from ..credit import StepBatch
from ..learner import Learner, StepSequence
from ..learner.span_routing import route_spans
from ..rollout.spans import HiperFormat, token_mask

__all__ = ["SpanLayout", "prepare", "span_layout", "token_offsets", "update_kwargs"]

LEVELS = ("action", "subgoal", "switch")


@dataclass
class SpanLayout:
    """Per sequence: a boolean mask per span over its response tokens, and V_low's position."""

    masks: dict[str, list[np.ndarray]]
    low_pos: list[int]


def token_offsets(tokenizer: Any, ids: list[int]) -> tuple[str, np.ndarray, np.ndarray]:
    """The response text as its tokens decode one by one (special tokens kept), and each
    token's character range [start, end) in it (the reference's ``_build_text_and_offsets``)."""
    pieces = tokenizer.batch_decode(
        [[int(i)] for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False
    )
    ends = np.cumsum([len(p) for p in pieces], dtype=np.int64)
    return "".join(pieces), ends - np.asarray([len(p) for p in pieces], dtype=np.int64), ends


def span_layout(tokenizer: Any, fmt: HiperFormat, seqs: list[StepSequence]) -> SpanLayout:
    """Span masks and V_low positions of every sequence's response."""
    masks: dict[str, list[np.ndarray]] = {k: [] for k in LEVELS}
    low_pos = []
    for s in seqs:
        text, starts, ends = token_offsets(tokenizer, s.response_ids)
        sp = fmt.spans(text)
        for k, span in zip(LEVELS, (sp.action_span, sp.subgoal_span, sp.switch_span)):
            masks[k].append(token_mask(starts, ends, span))
        pos = 0
        for span in (sp.subgoal_span, sp.switch_span):
            after = np.flatnonzero(starts >= span[1]) if span is not None else []
            if len(after):
                pos = int(after[0])
                break
        low_pos.append(pos)
    return SpanLayout(masks, low_pos)


def prepare(
    learner: Learner, tokenizer: Any, fmt: HiperFormat, batch: StepBatch, seqs: list[StepSequence]
) -> tuple[StepBatch, SpanLayout]:
    """The step batch with the critic's three values, and the responses' span layout."""
    layout = span_layout(tokenizer, fmt, seqs)
    values = np.zeros((len(batch), 3))
    rows = [s.step_row for s in seqs]
    mine = learner.hiper_values(seqs, layout.low_pos)
    for part_rows, part in D.all_gather_objects((rows, mine)):  # torchrun: every rank's rows
        values[part_rows] = part
    extras = {**batch.extras, "value_high": values[:, 1], "value_term": values[:, 2]}
    return dataclasses.replace(batch, value=values[:, 0], extras=extras), layout


def update_kwargs(
    res: Any, layout: SpanLayout, batch: StepBatch, seqs: list[StepSequence]
) -> dict[str, Any]:
    """``Learner.update`` keyword arguments: routed token advantages, loss masks, three-head
    value targets (``returns``), old values, which heads train where, V_low positions."""
    lengths = [len(s.response_ids) for s in seqs]
    token_step = np.repeat(np.asarray([s.step_row for s in seqs], dtype=np.int64), lengths)
    flat = {k: np.concatenate(v) if v else np.zeros(0, bool) for k, v in layout.masks.items()}
    adv, keep = route_spans(res.components, token_step, flat)
    cuts = np.cumsum(lengths)[:-1]
    c = res.components
    returns = np.stack([c["returns_low"], c["returns_high"], c["returns_term"]], axis=1)
    old = np.stack([batch.value, batch.extras["value_high"], batch.extras["value_term"]], axis=1)
    weights = np.stack(
        [np.ones(len(batch)), c["segment_start"], np.ones(len(batch))], axis=1
    ).astype(np.float32)
    return {
        "token_advantages": np.split(adv, cuts),
        "loss_masks": np.split(keep, cuts),
        "returns": returns,
        "old_values": old,
        "value_weights": weights,
        "value_pos": layout.low_pos,
    }
