"""HiPER's trainer side (``credit=hiper``): its action format, prompt hint, spans and critic heads.

HiPER's estimator is ``credit/hiper.py`` (numpy); it asks the trainer, by name
(``credit.hiper.ASKS``), for the ``hiper`` action format, a three-output critic and the ``hiper``
step hooks. This module is the code behind those names, registered at import:

- **the action format** :class:`HiperFormat`:
  ``<switch>KEEP|SWITCH</switch><subgoal>…</subgoal><action>…</action>``. Per turn the policy
  decides whether to keep its current subgoal or switch to a new one, writes the subgoal, then one
  action (Peng et al., 2026, arXiv:2602.16165). ``parse`` returns the action, or none (an invalid
  step, as for any format) when a span is missing or the switch says neither KEEP nor SWITCH;
  :meth:`HiperFormat.spans` gives the switch decision, the subgoal text and each span's character
  range (tags included, as the reference masks them). Validity follows the authors' projection
  (``alfworld_projection_options``): an action tag, a switch tag holding KEEP or SWITCH
  (case-insensitive) and a subgoal tag are all required. A turn starts a new segment when its
  switch text is non-empty and not KEEP (their mask builder's rule); a missing or empty switch
  counts as KEEP there (the step is invalid anyway). The prompt carries the current subgoal
  (:func:`instructions`) and closes with :data:`HINT`; the step batch records ``switch``,
  ``subgoal`` and ``switch_span`` per step.
- **the step hooks**, as in the authors' trainer (github.com/JonP07/HiPER-agent:
  ``hiper_hae/hier_mask.py``, ``core_hae.compute_value_mask``,
  ``verl/workers/critic/dp_critic.py``):

  - :func:`span_layout`: each response's tokens are decoded one by one (their character
    offsets), the spans found in that text give per-token masks (:func:`token_mask`), and V_low's
    position is the first token after ``</subgoal>`` (else after ``</switch>``, else the first);
  - :func:`prepare`: the critic, ``Linear(hidden, 3)`` on the policy's final hidden state, gives
    V_low at that position (the state before it: the last token of ``</subgoal>``) and V_high and
    V_term at the last prompt token; they fill ``value``, ``value_high`` and ``value_term``;
  - :func:`update_inputs`: each level's advantage on its span (:func:`route_spans`; tokens
    outside every span leave the policy loss) and the three heads' targets: V_low on every turn,
    V_high on segment starts, V_term on every turn (coefficients 1, the reference's).

Difference: the reference's critic is a separate model; here the heads sit on the policy's hidden
state (the trainer's value head for every critic-based module), trained with
``trainer.value_coef``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentrl.envs.commands import ascii_upper

from .. import distributed as D
from ..credit import CreditResult, StepBatch
from ..learner import Learner, StepSequence
from ..rollout.parse import ActionFormat, ParsedAction
from .registry import FormatHook, StepHooks, register_format, register_steps

__all__ = [
    "HINT",
    "HiperFormat",
    "HiperSpans",
    "SpanLayout",
    "build_format",
    "example_format_columns",
    "example_value_columns",
    "instructions",
    "prepare",
    "route_spans",
    "span_layout",
    "token_mask",
    "token_offsets",
    "update_inputs",
]

#: The prompt's closing instruction under the HiPER format.
HINT = "Answer with the switch, subgoal and action blocks described after the observation."
LEVELS = ("action", "subgoal", "switch")
_TAGS = ("switch", "subgoal", "action")


# -- the action format ---------------------------------------------------------------------------
@dataclass(frozen=True)
class HiperSpans:
    """One response's HiPER structure (``None`` spans: the tag is missing)."""

    switch: bool  # this turn starts a new subgoal segment
    switch_text: str | None
    subgoal: str | None
    action: str | None
    switch_span: tuple[int, int] | None
    subgoal_span: tuple[int, int] | None
    action_span: tuple[int, int] | None


def _find(tag: str, text: str) -> tuple[str, tuple[int, int]] | None:
    """Content and (start, end) character range (tags included) of the first complete tag."""
    m = re.search(rf"<{tag}>(.*?)</{tag}>", text, re.DOTALL)
    return None if m is None else (m.group(1), (m.start(), m.end()))


@dataclass(frozen=True)
class HiperFormat(ActionFormat):
    """``<switch>…</switch><subgoal>…</subgoal><action>…</action>`` per turn."""

    pattern: str | None = r"<action>(.*?)</action>"
    template: str = "<switch>SWITCH</switch><subgoal>{action}</subgoal><action>{action}</action>"

    def spans(self, response: str) -> HiperSpans:
        text = response if isinstance(response, str) else ""
        found = {tag: _find(tag, text) for tag in _TAGS}
        sw = found["switch"]
        sw_text = None if sw is None else ascii_upper(sw[0].strip())  # "ſwitch" is no SWITCH
        return HiperSpans(
            switch=bool(sw_text) and sw_text != "KEEP",
            switch_text=sw_text,
            subgoal=None if found["subgoal"] is None else found["subgoal"][0].strip(),
            action=None if found["action"] is None else found["action"][0].strip(),
            switch_span=None if sw is None else sw[1],
            subgoal_span=None if found["subgoal"] is None else found["subgoal"][1],
            action_span=None if found["action"] is None else found["action"][1],
        )

    def renders(self, action: str, memory: Any = None) -> list[str]:
        """Constrained decoding can write SWITCH with the action as the new subgoal, or (once a
        subgoal exists) KEEP with the current subgoal: the subgoal space of free text cannot be
        enumerated, so these are the two subgoals a constrained response can hold."""
        out = [f"<switch>SWITCH</switch><subgoal>{action}</subgoal><action>{action}</action>"]
        if memory:
            out.append(f"<switch>KEEP</switch><subgoal>{memory}</subgoal><action>{action}</action>")
        return out

    def prompt_note(self, memory: Any = None) -> str:
        return "\n\n" + instructions(memory)

    def remember(self, memory: Any, response: str) -> Any:
        """The current subgoal: the last one written (kept when a response has none)."""
        sub = self.spans(response).subgoal
        return sub if sub else memory

    def step_extras(self, response: str) -> dict[str, Any]:
        s = self.spans(response)
        return {"switch": s.switch, "subgoal": s.subgoal, "switch_span": s.switch_span is not None}

    def parse(self, response: str, finish_reason: str = "stop") -> ParsedAction:
        parsed = super().parse(response, finish_reason)
        if parsed.action is None:
            return parsed
        s = self.spans(response)
        if s.switch_text is None:
            return ParsedAction(None, "no <switch> tag")
        if s.switch_text not in ("KEEP", "SWITCH"):
            return ParsedAction(None, "switch is neither KEEP nor SWITCH")
        if s.subgoal is None:
            return ParsedAction(None, "no <subgoal> tag")
        return parsed


def build_format(action: Mapping[str, Any]) -> HiperFormat:
    """The format from ``rollout.action`` settings: its own tags; ``think``, ``require_think`` and
    ``max_action_chars`` as configured."""
    return HiperFormat(**{k: action[k] for k in ("think", "require_think", "max_action_chars")})


def token_mask(starts: np.ndarray, ends: np.ndarray, span: tuple[int, int] | None) -> np.ndarray:
    """Per token, whether its character range [start, end) overlaps ``span`` (all False: none)."""
    starts, ends = np.asarray(starts), np.asarray(ends)
    if span is None:
        return np.zeros(len(starts), dtype=bool)
    lo, hi = span
    return (ends > lo) & (starts < hi)


def instructions(current_subgoal: str | None) -> str:
    """The prompt's HiPER block: the current subgoal and the three spans to write."""
    return (
        f"Your current sub-goal is: {current_subgoal or 'None'}\n"
        "At every step, reconsider your sub-goal given the latest observation. Respond with "
        "exactly three blocks, in this order and nothing else:\n"
        "<switch>KEEP or SWITCH</switch> (KEEP continues the current sub-goal, SWITCH starts a "
        "new short one)\n"
        "<subgoal>the sub-goal you follow next (on KEEP, the current one unchanged)</subgoal>\n"
        "<action>exactly one admissible action</action>"
    )


def example_format_columns(batch: StepBatch, switch_rate: float = 0.3, seed: int = 0) -> StepBatch:
    """``batch`` plus what the format records: per step a random ``switch`` decision, a
    ``subgoal`` text (a new one on each switch, ``None`` on invalid steps) and ``switch_span``."""
    rng = np.random.default_rng(seed)
    switch = rng.random(len(batch)) < switch_rate
    seg = np.cumsum(switch | (batch.t == 0))
    subgoal = np.empty(len(batch), dtype=object)
    subgoal[:] = [f"subgoal {k}" if v else None for k, v in zip(seg, batch.valid)]
    extras = {
        **batch.extras,
        "switch": switch,
        "subgoal": subgoal,
        "switch_span": batch.valid.copy(),
    }
    return dataclasses.replace(batch, extras=extras)


# -- span routing and the three-head critic --------------------------------------------------------
def route_spans(
    components: Mapping[str, np.ndarray],
    token_step: np.ndarray,
    masks: Mapping[str, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """Token advantages (float32) and the loss mask from per-step components and span masks.

    Each level's advantage goes to its own tokens of the step's response, as in the authors'
    trainer: action span <- ``action`` (low level); subgoal span <- ``subgoal`` (high level), only
    on turns that start a segment; switch span <- ``switch`` (termination), every turn. Where
    spans overlap the advantages add up. Tokens outside every span (whitespace between tags, a
    missing span) get no advantage and leave the policy loss (the mask); a response without an
    action span gets the action advantage on all of its tokens (their fallback).

    ``token_step``: per token position, the step row of its response or -1 (as
    :func:`agentrl.credit.step_to_tokens`). ``masks``: boolean arrays of ``token_step``'s shape
    for ``"action"``, ``"subgoal"`` and ``"switch"``. ``components`` needs ``action``,
    ``subgoal``, ``switch`` and ``segment_start`` (per step, as ``credit/hiper.py`` returns).
    """
    idx = np.asarray(token_step)
    resp = idx >= 0
    rows = np.maximum(idx, 0)
    for k in LEVELS:
        m = masks.get(k)
        if m is None or np.shape(m) != idx.shape:
            raise ValueError(
                f"span mask {k!r} is missing or not shaped like token_step {idx.shape}"
            )
    missing = [k for k in (*LEVELS, "segment_start") if k not in components]
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
    mine = learner.head_values(seqs, layout.low_pos)
    for part_rows, part in D.all_gather_objects((rows, mine)):  # torchrun: every rank's rows
        values[part_rows] = part
    extras = {**batch.extras, "value_high": values[:, 1], "value_term": values[:, 2]}
    return dataclasses.replace(batch, value=values[:, 0], extras=extras), layout


def update_inputs(
    res: CreditResult, layout: SpanLayout, batch: StepBatch, seqs: list[StepSequence]
) -> tuple[dict[str, Any], dict[str, float]]:
    """``Learner.update`` keyword arguments (routed token advantages, loss masks, three-head
    value targets ``returns``, old values, which heads train where, V_low positions) and the
    fraction of response tokens left in the policy loss (``credit/span_token_fraction``)."""
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
    kw = {
        "token_advantages": np.split(adv, cuts),
        "loss_masks": np.split(keep, cuts),
        "returns": returns,
        "old_values": old,
        "value_weights": weights,
        "value_pos": layout.low_pos,
    }
    kept = np.concatenate(kw["loss_masks"]) if seqs else np.zeros(0, bool)
    local = {"credit/span_token_fraction": float(kept.mean()) if len(kept) else 0.0}
    return kw, D.reduce_metrics(local, weight=len(kept))  # torchrun: over all ranks


def example_value_columns(batch: StepBatch, seed: int = 1) -> StepBatch:
    """``batch`` plus the critic's ``value_high`` / ``value_term`` (noise)."""
    rng = np.random.default_rng(seed)
    n = len(batch)
    extras = {
        **batch.extras,
        "value_high": rng.normal(0.0, 1.0, size=n),
        "value_term": rng.normal(0.0, 1.0, size=n),
    }
    return dataclasses.replace(batch, extras=extras)


register_format(
    "hiper",
    FormatHook(
        build=build_format,
        prompt_hint=HINT,
        records=frozenset({"switch", "subgoal", "switch_span"}),
        example=example_format_columns,
    ),
)
register_steps(
    "hiper",
    StepHooks(
        prepare=prepare,
        update_inputs=update_inputs,
        supplies=frozenset({"value", "value_high", "value_term"}),
        example=example_value_columns,
        sets_token_advantages=True,
    ),
)
