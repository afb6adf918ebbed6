"""Training sequences (one per agent step) and their collation into tensors.

Layout of a collated micro-batch: prompts are left-padded so that every response starts at the
same column ``P``; responses are right-padded to width ``R``::

    [pad pad p0 p1 p2 | r0 r1 r2 pad]      columns 0..P-1 prompt, P..P+R-1 response

so the logits predicting response token ``j`` sit at column ``P - 1 + j`` for every row, and
the model needs logits for the last ``R + 1`` columns only (``logits_to_keep``). Position ids
count real tokens only, exactly as the generation backend does with left padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["Collated", "StepSequence", "collate", "collate_distinct", "distinct_rows"]


@dataclass
class StepSequence:
    """One agent step as the learner sees it: exact prompt and response token ids.

    ``allowed[j]`` lists the token ids the sampler was restricted to at response position ``j``
    (constrained decoding), or ``allowed`` is ``None`` (full vocabulary).

    ``old_logprobs`` are the behaviour policy's: the log-prob of each token under the exact
    weights that sampled it, and ``versions[j]`` is those weights' policy version (learner
    updates done when token ``j`` was sampled; ``None``: not recorded). Under asynchronous
    rollouts (``rollout.staleness`` >= 1) tokens of one sequence share a version, those of one
    episode may not (partial rollouts).
    """

    prompt_ids: list[int]
    response_ids: list[int]
    old_logprobs: list[float]
    step_row: int  # the step-batch row this sequence is
    allowed: list[list[int]] | None = None
    versions: list[int] | None = None

    def __post_init__(self) -> None:
        if not self.prompt_ids:
            raise ValueError("a training sequence has an empty prompt")
        if len(self.old_logprobs) != len(self.response_ids):
            raise ValueError(
                f"{len(self.old_logprobs)} log-probs for {len(self.response_ids)} response tokens"
            )
        if self.allowed is not None and len(self.allowed) != len(self.response_ids):
            raise ValueError("allowed must give one token set per response token")
        if self.versions is not None and len(self.versions) != len(self.response_ids):
            raise ValueError("versions must give one policy version per response token")

    def forced(self) -> np.ndarray:
        """Per response token, whether constrained decoding left no choice (one allowed token:
        log-prob 0 at sampling, e.g. ``<action>``, ``</action>`` and EOS of the action template)."""
        if self.allowed is None:
            return np.zeros(len(self.response_ids), dtype=bool)
        return np.fromiter((len(a) == 1 for a in self.allowed), bool, len(self.allowed))


@dataclass
class Collated:
    input_ids: torch.Tensor  # (B, P + R)
    attention_mask: torch.Tensor  # (B, P + R)
    position_ids: torch.Tensor  # (B, P + R)
    response_ids: torch.Tensor  # (B, R)
    response_mask: torch.Tensor  # (B, R) bool
    old_logprobs: torch.Tensor  # (B, R) float32, 0 on padding
    step_rows: np.ndarray  # (B,)
    allowed_ids: torch.Tensor | None  # (B, R, K) token ids, -1 padding
    prompt_width: int
    response_width: int

    def to(self, device: torch.device | str) -> Collated:
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return Collated(
            move(self.input_ids),
            move(self.attention_mask),
            move(self.position_ids),
            move(self.response_ids),
            move(self.response_mask),
            move(self.old_logprobs),
            self.step_rows,
            move(self.allowed_ids),
            self.prompt_width,
            self.response_width,
        )

    def rows_of(self, inverse: torch.Tensor, seqs: Sequence[StepSequence]) -> Collated:
        """The batch of ``seqs`` from this batch of their distinct rows: row ``b`` is row
        ``inverse[b]`` here, with ``seqs[b]``'s own log-probs and step row (equal token ids do not
        mean equal behaviour log-probs: under asynchronous rollouts they may come from different
        policy versions)."""
        old = torch.zeros((len(seqs), self.response_width), dtype=torch.float32)
        for b, s in enumerate(seqs):
            if s.old_logprobs:
                old[b, : len(s.old_logprobs)] = torch.as_tensor(s.old_logprobs, dtype=torch.float32)
        take = lambda t: None if t is None else t.index_select(0, inverse.to(t.device))  # noqa: E731
        return Collated(
            take(self.input_ids),
            take(self.attention_mask),
            take(self.position_ids),
            take(self.response_ids),
            take(self.response_mask),
            old.to(self.old_logprobs.device),
            np.array([s.step_row for s in seqs]),
            take(self.allowed_ids),
            self.prompt_width,
            self.response_width,
        )


def collate(seqs: Sequence[StepSequence], pad_token_id: int) -> Collated:
    """Tensors for a micro-batch of step sequences (see the module docstring for the layout)."""
    if not seqs:
        raise ValueError("cannot collate an empty micro-batch")
    B = len(seqs)
    P = max(len(s.prompt_ids) for s in seqs)
    R = max(1, max(len(s.response_ids) for s in seqs))
    ids = torch.full((B, P + R), int(pad_token_id), dtype=torch.long)
    mask = torch.zeros((B, P + R), dtype=torch.long)
    resp = torch.full((B, R), int(pad_token_id), dtype=torch.long)
    resp_mask = torch.zeros((B, R), dtype=torch.bool)
    old = torch.zeros((B, R), dtype=torch.float32)
    constrained = any(s.allowed is not None for s in seqs)
    K = max((len(a) for s in seqs if s.allowed is not None for a in s.allowed), default=1)
    allowed = torch.full((B, R, K), -1, dtype=torch.long) if constrained else None
    for b, s in enumerate(seqs):
        p, r = len(s.prompt_ids), len(s.response_ids)
        ids[b, P - p : P] = torch.as_tensor(s.prompt_ids, dtype=torch.long)
        mask[b, P - p : P + r] = 1
        if r:
            ids[b, P : P + r] = torch.as_tensor(s.response_ids, dtype=torch.long)
            resp[b, :r] = ids[b, P : P + r]
            resp_mask[b, :r] = True
            old[b, :r] = torch.as_tensor(s.old_logprobs, dtype=torch.float32)
        if allowed is not None:
            if s.allowed is None:
                allowed[b, :, 0] = -2  # marker: this row is unconstrained
            else:
                for j, a in enumerate(s.allowed):
                    allowed[b, j, : len(a)] = torch.as_tensor(a, dtype=torch.long)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return Collated(
        ids,
        mask,
        positions,
        resp,
        resp_mask,
        old,
        np.array([s.step_row for s in seqs]),
        allowed,
        P,
        R,
    )


def distinct_rows(seqs: Sequence[StepSequence]) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, inverse)``: the first row of every distinct (prompt, response, constraint), and for
    each row the position in ``rows`` of its equal. A no-grad scoring pass depends on nothing else,
    so equal rows are scored once: multi-turn rollouts of one task revisit states, and a group's
    rollouts often take the same action in them (in the default Sokoban run most rows repeat)."""
    first: dict[tuple, int] = {}
    rows: list[int] = []
    inverse = np.empty(len(seqs), np.int64)
    for i, s in enumerate(seqs):
        allowed = None if s.allowed is None else tuple(tuple(a) for a in s.allowed)
        key = (tuple(s.prompt_ids), tuple(s.response_ids), allowed)
        j = first.get(key)
        if j is None:
            j = first[key] = len(rows)
            rows.append(i)
        inverse[i] = j
    return np.asarray(rows, np.int64), inverse


def collate_distinct(
    seqs: Sequence[StepSequence], pad_token_id: int
) -> tuple[Collated, Collated, torch.Tensor | None]:
    """``(forward, rows, inverse)`` for a micro-batch that may repeat sequences: ``forward``
    collates each distinct sequence once (:func:`distinct_rows`), ``rows`` is the batch of every
    sequence (:meth:`Collated.rows_of`) and ``inverse[b]`` is the row of ``forward`` that row ``b``
    repeats. Without repeats ``forward`` is ``rows`` and ``inverse`` is ``None``."""
    first, inverse = distinct_rows(seqs)
    if len(first) == len(seqs):
        batch = collate(seqs, pad_token_id)
        return batch, batch, None
    forward = collate([seqs[int(i)] for i in first], pad_token_id)
    inv = torch.as_tensor(inverse)
    return forward, forward.rows_of(inv, seqs), inv
