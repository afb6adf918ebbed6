"""One PPO update's pieces, shared by the one-process and the sharded learner: its checked inputs,
the rows its mini-batches are drawn from, micro-batch plans and per-token tensors.

Nothing here holds state between calls: :class:`UpdateInputs` is made once per
:meth:`~agentrl.learner.Learner.update` and passed to every micro-batch's loss as an argument.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from agentrl.credit import step_to_tokens

from .sequences import Collated, StepSequence
from .value_rows import ValueRows

__all__ = [
    "NonFiniteError",
    "RowLayout",
    "UpdateInputs",
    "local_layout",
    "loss_tokens",
    "per_token",
    "plan_micro_batches",
    "token_advantages",
]


class NonFiniteError(FloatingPointError):
    """A loss, gradient or advantage is NaN or infinite: the update is stopped."""


def token_advantages(batch: Collated, step_advantages: np.ndarray) -> torch.Tensor:
    """(B, R) advantages over the response window: row b's response tokens carry the advantage
    of its step row, padding carries 0 (prompt tokens are outside the window: no loss at all)."""
    token_step = np.where(batch.response_mask.cpu().numpy(), batch.step_rows[:, None], -1)
    return torch.as_tensor(step_to_tokens(step_advantages, token_step))


@dataclass(frozen=True)
class UpdateInputs:
    """What one update's micro-batch losses read, besides the sequences and the model.

    ``adv`` is indexed by step row; the per-sequence lists (``token_adv``, ``loss_masks``,
    ``ref``) by sequence index. A sharded learner's padding micro-batches use the index
    ``len(seqs)``, past every list: :func:`per_token` gives zeros there.
    """

    adv: np.ndarray
    keep: Sequence[
        np.ndarray
    ]  # per sequence, the response tokens in the loss (:func:`loss_tokens`)
    token_adv: Sequence[np.ndarray] | None = None
    loss_masks: Sequence[np.ndarray] | None = None
    returns: np.ndarray | None = None
    old_values: np.ndarray | None = None
    value_rows: ValueRows | None = None
    ref: Sequence[np.ndarray] | None = None  # reference log-probs (kl_coef > 0)
    #: ``trainer.old_logprobs=learner``: π_old recomputed by the learner (the engine's log-probs
    #: in the sequences are then the behaviour policy), and the correction's detached weight of
    #: each token's policy-gradient term (``None``: no correction)
    old: Sequence[np.ndarray] | None = None
    pg_weight: Sequence[np.ndarray] | None = None

    @classmethod
    def checked(
        cls,
        seqs: Sequence[StepSequence],
        step_advantages: np.ndarray,
        *,
        token_advantages: Sequence[np.ndarray] | None,
        loss_masks: Sequence[np.ndarray] | None,
        returns: np.ndarray | None,
        old_values: np.ndarray | None,
        value_rows: ValueRows | None,
        mode: str = "sampled",
    ) -> UpdateInputs:
        """The inputs after the checks :meth:`Learner.update` promises (shapes, finiteness);
        ``mode`` is ``trainer.loss_tokens`` (:func:`loss_tokens`)."""
        adv = np.asarray(step_advantages, dtype=np.float32)
        if not np.isfinite(adv).all():
            raise NonFiniteError("non-finite step advantages: the update is skipped")
        for name, per_seq in (("token_advantages", token_advantages), ("loss_masks", loss_masks)):
            if per_seq is None:
                continue
            if len(per_seq) != len(seqs):
                raise ValueError(f"{name} has {len(per_seq)} entries for {len(seqs)} sequences")
            for i, (a, s) in enumerate(zip(per_seq, seqs)):
                if np.shape(a) != (len(s.response_ids),):
                    raise ValueError(
                        f"{name}[{i}] has shape {np.shape(a)}, expected ({len(s.response_ids)},)"
                    )
                if name == "token_advantages" and not np.isfinite(a).all():
                    raise NonFiniteError(f"non-finite token advantages in sequence {i}")
        keep = loss_tokens(seqs, loss_masks, mode)
        return cls(adv, keep, token_advantages, loss_masks, returns, old_values, value_rows)

    def with_reference(self, ref: Sequence[np.ndarray] | None) -> UpdateInputs:
        return dataclasses.replace(self, ref=ref)

    def with_old(
        self, old: Sequence[np.ndarray], pg_weight: Sequence[np.ndarray] | None
    ) -> UpdateInputs:
        return dataclasses.replace(self, old=old, pg_weight=pg_weight)


def loss_tokens(
    seqs: Sequence[StepSequence], loss_masks: Sequence[np.ndarray] | None, mode: str
) -> list[np.ndarray]:
    """Per sequence, which response tokens are in the loss: its denominators, its entropy and KL
    terms and the per-token metrics.

    ``"sampled"`` (the default): the tokens the policy chose, i.e. not forced by constrained
    decoding (:meth:`StepSequence.forced`: one allowed token, log-prob 0, no gradient to give),
    and, with ``loss_masks`` (HiPER's spans), only the tokens they keep, as HiPER's own trainer
    does (its span mask replaces the response mask of the actor's loss). ``"all"``: every
    response token (the behaviour before ``trainer.loss_tokens``), ``loss_masks`` then removing
    tokens from the policy-gradient term only.
    """
    if mode == "all":
        return [np.ones(len(s.response_ids), dtype=bool) for s in seqs]
    if mode != "sampled":
        raise ValueError(f"loss_tokens must be 'sampled' or 'all', got {mode!r}")
    keep = [~s.forced() for s in seqs]
    if loss_masks is not None:
        keep = [k & np.asarray(m, dtype=bool) for k, m in zip(keep, loss_masks)]
    return keep


@dataclass(frozen=True)
class RowLayout:
    """The rows an update's mini-batches are drawn from. One process: its sequences. Sharded:
    the global step rows, of which this rank holds some (``local``).

    Per row: ``local`` (the index of its sequence here, -1 on another rank), ``step_row``,
    ``lengths`` (for the loss denominators) and ``active`` (whether any of its
    advantages is non-zero: only those need a forward when zero advantages can be skipped);
    ``lengths`` counts the tokens in the loss (:func:`loss_tokens`).
    """

    local: np.ndarray
    step_row: np.ndarray
    lengths: np.ndarray
    active: np.ndarray

    @property
    def n(self) -> int:
        return len(self.local)


def local_layout(seqs: Sequence[StepSequence], inp: UpdateInputs) -> RowLayout:
    """One process's rows: its sequences, in order."""
    rows = np.asarray([s.step_row for s in seqs], dtype=np.int64)
    if inp.token_adv is not None:
        active = np.asarray([bool(np.any(a)) for a in inp.token_adv], dtype=bool)
    else:
        active = inp.adv[rows] != 0.0 if len(rows) else np.zeros(0, bool)
    lengths = np.asarray([int(np.sum(k)) for k in inp.keep], dtype=np.int64)
    return RowLayout(np.arange(len(seqs), dtype=np.int64), rows, lengths, active)


def plan_micro_batches(
    seqs: Sequence[StepSequence], rows: np.ndarray, size: int, budget: int | None
) -> list[list[int]]:
    """Split ``rows`` into micro-batches of similar length (less padding), at most ``size``
    sequences and (if set) ``budget`` padded tokens each. Equal rows end up next to each other
    (ties are broken by the token ids), so that they mostly share a micro-batch and its forward."""
    order = sorted(
        (int(i) for i in rows),
        key=lambda i: (
            len(seqs[i].prompt_ids) + len(seqs[i].response_ids),
            seqs[i].prompt_ids,
            seqs[i].response_ids,
        ),
    )
    size = max(1, size)
    out: list[list[int]] = []
    cur: list[int] = []
    P = R = 0
    for i in order:
        p, r = len(seqs[i].prompt_ids), max(1, len(seqs[i].response_ids))
        width = max(P, p) + max(R, r)
        if cur and (len(cur) >= size or (budget is not None and (len(cur) + 1) * width > budget)):
            out.append(cur)
            cur, P, R = [], 0, 0
        cur.append(i)
        P, R = max(P, p), max(R, r)
    if cur:
        out.append(cur)
    return out


def per_token(
    per_seq: Sequence[np.ndarray], idx: Sequence[int], width: int, dtype, device
) -> torch.Tensor:
    """(B, width) tensor of the per-sequence token arrays of ``idx`` (0 / False on padding and
    for an index past ``per_seq``: a sharded learner's padding sequence)."""
    out = np.zeros((len(idx), width))
    for k, i in enumerate(idx):
        if i < len(per_seq):
            out[k, : len(per_seq[i])] = per_seq[i]
    return torch.as_tensor(out, dtype=dtype, device=device)
