"""The learner's no-grad passes over step sequences: log-probs (policy or reference), prompt
features (value head, hidden states), the token shapers' signals, and HiPER's critic values.

:class:`ScoringPasses` is the base of :class:`~agentrl.learner.Learner`; it reads the learner's
``model``, ``reference``, ``value_head``, ``cfg``, ``temperature``, ``pad_token_id`` and
``device``. Every pass runs the micro-batches of :meth:`_scoring_plan`: here the rows
themselves; a sharded learner adds dummy micro-batches so that every rank runs as many forwards
(each is a collective under FSDP), and drops their results.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np
import torch

from ..config import LearnerConfig
from .forward import response_forward
from .sequences import StepSequence, collate, distinct_rows
from .update import plan_micro_batches

__all__ = ["ScoringPasses", "is_peft"]


def is_peft(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a peft model (LoRA adapters that can be disabled)."""
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")


def _spread(scored: list[np.ndarray], rows: np.ndarray, inverse: np.ndarray) -> list[np.ndarray]:
    """Per-row results from those of the distinct rows (each row gets its own copy)."""
    return [scored[int(rows[j])].copy() for j in inverse]


class ScoringPasses:
    """No-grad passes of the learner (see the module docstring)."""

    model: torch.nn.Module
    cfg: LearnerConfig
    reference: torch.nn.Module | None
    value_head: torch.nn.Linear | None
    temperature: float
    pad_token_id: int
    device: torch.device

    # -- precision -----------------------------------------------------------------------------
    def autocast(self):
        if (
            self.cfg.dtype in ("auto", "bfloat16")
            and self.device.type == "cuda"
            and torch.cuda.is_bf16_supported()
        ):
            return torch.autocast("cuda", dtype=torch.bfloat16)
        if self.cfg.dtype == "bfloat16" and self.device.type == "cpu":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _scoring_model(self, reference: bool):
        """The model to score with and the context to score in: the policy, or the reference
        (the LoRA base with adapters disabled, else the frozen copy when there is one)."""
        if reference and is_peft(self.model):
            return self.model, self.model.disable_adapter()
        if reference and self.reference is not None:
            return self.reference, contextlib.nullcontext()
        return self.model, contextlib.nullcontext()

    def _scoring_plan(
        self, seqs: Sequence[StepSequence], rows: np.ndarray
    ) -> tuple[list[StepSequence], list[list[int]], int]:
        """How a no-grad pass scores ``rows`` of ``seqs``: the sequences to collate from, the
        micro-batches (indices into them) to run, and how many of those are real. Here all are;
        the sharded learner adds dummy micro-batches so that every rank runs as many forwards."""
        mbs = self._micro_batches(seqs, np.asarray(rows, dtype=np.int64))
        return list(seqs), mbs, len(mbs)

    @torch.no_grad()
    def logprobs(self, seqs: Sequence[StepSequence], reference: bool = False) -> list[np.ndarray]:
        """Per sequence, the log-probs of its response tokens under the policy (or reference);
        equal sequences are scored once (:func:`distinct_rows`)."""
        out: list[np.ndarray] = [np.zeros(0, np.float32)] * len(seqs)
        rows, inverse = distinct_rows(seqs)
        model, ctx = self._scoring_model(reference)
        was = model.training
        model.eval()
        ext, mbs, real = self._scoring_plan(seqs, rows)
        with ctx, self.autocast():
            for j, idx in enumerate(mbs):
                batch = collate([ext[i] for i in idx], self.pad_token_id).to(self.device)
                fo = response_forward(model, batch, self.temperature, want_entropy=False)
                if j >= real:  # a sharded learner's dummy micro-batch
                    continue
                lp = fo.logprobs.float().cpu().numpy()
                for k, i in enumerate(idx):
                    out[i] = lp[k, : len(seqs[i].response_ids)]
        model.train(was)
        return _spread(out, rows, inverse)

    @torch.no_grad()
    def prompt_features(
        self, prompts: Sequence[Sequence[int]], embedding_layer: int | None = None
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Per prompt, the value-head output and/or the hidden state of ``embedding_layer``
        (an index into ``hidden_states``, e.g. -8) at the last prompt token; ``None`` when off."""
        if self.value_head is None and embedding_layer is None:
            return None, None
        n = len(prompts)
        values = np.zeros(n, np.float32) if self.value_head is not None else None
        embs: np.ndarray | None = None
        seqs = [StepSequence(list(p), [], [], i) for i, p in enumerate(prompts)]
        ext, mbs, real = self._scoring_plan(seqs, np.arange(n))
        if len(ext) > n:  # a sharded learner's dummy: a prompt alone, as the others
            ext[n] = StepSequence([self.pad_token_id], [], [], 0)
        with self.autocast():
            for j, idx in enumerate(mbs):
                b = collate([ext[i] for i in idx], self.pad_token_id).to(self.device)
                P = b.prompt_width
                out = self.model(
                    input_ids=b.input_ids[:, :P],
                    attention_mask=b.attention_mask[:, :P],
                    position_ids=b.position_ids[:, :P],
                    use_cache=False,
                    logits_to_keep=1,
                    output_hidden_states=True,
                )
                v = None  # computed on dummy micro-batches too (a sharded head is a collective)
                if values is not None:
                    v = self.value_head(out.hidden_states[-1][:, -1, :].float())[:, 0]
                if j >= real:
                    continue
                if v is not None:
                    values[idx] = v.float().cpu().numpy()
                if embedding_layer is not None:
                    h = out.hidden_states[embedding_layer][:, -1, :].float().cpu().numpy()
                    if embs is None:
                        embs = np.zeros((n, h.shape[1]), np.float32)
                    embs[idx] = h
        if embedding_layer is not None and embs is None:  # no prompts (here: on this rank)
            embs = np.zeros((0, self._hidden_size()), np.float32)
        return values, embs

    def _hidden_size(self) -> int:
        m = self.model.get_base_model() if is_peft(self.model) else self.model
        return int(m.config.hidden_size)

    @torch.no_grad()
    def token_signals(
        self, seqs: Sequence[StepSequence], wanted: frozenset[str] | set[str]
    ) -> dict[str, list[np.ndarray]]:
        """Per sequence, the token shapers' signals of its response tokens under the current
        policy: ``entropy`` (of the sampling distribution), ``self_certainty`` and ``token_logit``
        (raw logits), ``ref_logprob`` (the reference policy), plus the recorded ``logprob`` and
        ``token_id``. Only the ``wanted`` ones are computed."""
        out: dict[str, list[np.ndarray]] = {}
        if "logprob" in wanted:
            out["logprob"] = [np.asarray(s.old_logprobs, np.float64) for s in seqs]
        if "token_id" in wanted:
            out["token_id"] = [np.asarray(s.response_ids, np.int64) for s in seqs]
        if "ref_logprob" in wanted:
            if self.reference is None and not is_peft(self.model):
                raise ValueError("reference log-probs need Learner(keep_reference=True)")
            out["ref_logprob"] = self.logprobs(seqs, reference=True)
        passes = sorted({"entropy", "self_certainty", "token_logit"} & set(wanted))
        if not passes:
            return out
        for k in passes:
            out[k] = [np.zeros(0)] * len(seqs)
        rows, inverse = distinct_rows(seqs)  # equal sequences are scored once
        was = self.model.training
        self.model.eval()
        ext, mbs, real = self._scoring_plan(seqs, rows)
        with self.autocast():
            for j, idx in enumerate(mbs):
                batch = collate([ext[i] for i in idx], self.pad_token_id).to(self.device)
                fo = response_forward(self.model, batch, self.temperature,
                                      want_entropy="entropy" in wanted, want_certainty=True)  # fmt: skip
                if j >= real:  # a sharded learner's dummy micro-batch
                    continue
                got = {"entropy": fo.entropy, "self_certainty": fo.self_certainty,
                       "token_logit": fo.token_logit}  # fmt: skip
                for k in passes:
                    arr = got[k].float().cpu().numpy()
                    for j, i in enumerate(idx):
                        out[k][i] = arr[j, : len(seqs[i].response_ids)].astype(np.float64)
        self.model.train(was)
        for k in passes:
            out[k] = _spread(out[k], rows, inverse)
        return out

    @torch.no_grad()
    def head_values(self, seqs: Sequence[StepSequence], low_pos: Sequence[int]) -> np.ndarray:
        """(N, 3) values of a three-output value head: output 0 at response position
        ``low_pos[i]`` (the value of the state before that token; 0: the last prompt token),
        outputs 1 and 2 at the last prompt token."""
        if self.value_head is None or self.value_head.out_features != 3:
            raise ValueError("head_values needs Learner(value_head=True, value_outputs=3)")
        vals = np.zeros((len(seqs), 3), np.float32)
        pos = [int(p) for p in low_pos] + [0]  # [0]: a sharded learner's dummy sequence
        was = self.model.training
        self.model.eval()
        ext, mbs, real = self._scoring_plan(seqs, np.arange(len(seqs)))
        with self.autocast():
            for j, idx in enumerate(mbs):
                batch = collate([ext[i] for i in idx], self.pad_token_id).to(self.device)
                cols = torch.as_tensor([batch.prompt_width - 1 + pos[i] for i in idx],
                                       device=self.device)  # fmt: skip
                fo = response_forward(self.model, batch, self.temperature, want_entropy=False,
                                      want_hidden=True, hidden_cols=cols)  # fmt: skip
                three = self._three_values(fo)
                if j >= real:
                    continue
                vals[idx] = three.float().cpu().numpy()
        self.model.train(was)
        return vals

    def _three_values(self, fo) -> torch.Tensor:
        """(B, 3): head 0 at the V_low position, heads 1 and 2 at the last prompt token."""
        at_end = self.value_head(fo.last_hidden.float())
        at_low = self.value_head(fo.hidden_at.float())
        return torch.stack([at_low[:, 0], at_end[:, 1], at_end[:, 2]], dim=-1)

    def _micro_batches(self, seqs: Sequence[StepSequence], rows: np.ndarray) -> list[list[int]]:
        """:func:`~agentrl.learner.update.plan_micro_batches` with the configured sizes."""
        return plan_micro_batches(
            seqs, rows, self.cfg.micro_batch_size, self.cfg.micro_batch_tokens
        )
