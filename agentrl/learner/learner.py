"""The PPO learner: epochs of clipped policy-gradient updates over step sequences.

One :class:`Learner` owns the policy (a transformers model, optionally wrapped with LoRA), an
optional value head, the reference policy for the KL term and the AdamW optimiser.

- Reference: with LoRA the reference is the same model with its adapters disabled (no second
  copy); otherwise a frozen copy of the initial weights, made only when ``kl_coef > 0``.
- Micro-batches: a mini-batch of ``minibatch_size`` sequences is processed in micro-batches of
  ``micro_batch_size`` whose gradients accumulate; every loss term is normalised by the
  mini-batch's token (or sequence) count, so the result equals one big-batch step.
- Precision: ``dtype="auto"`` runs the forward pass under bf16 autocast on GPUs that support it
  and in float32 on CPU; the master weights stay float32.
- Safety: a non-finite loss or gradient norm raises :class:`NonFiniteError` before the optimiser
  steps, so the weights are never corrupted.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from agentrl.credit import step_to_tokens

from ..config import LearnerConfig
from .forward import response_forward
from .losses import aggregate, kl_penalty, normaliser, ppo_clip_loss, value_loss
from .schedule import LRSchedule
from .sequences import Collated, StepSequence, collate, distinct_rows
from .state_check import check_learner_state

__all__ = ["Learner", "LearnerConfig", "NonFiniteError", "token_advantages"]


def _spread(scored: list[np.ndarray], rows: np.ndarray, inverse: np.ndarray) -> list[np.ndarray]:
    """Per-row results from those of the distinct rows (each row gets its own copy)."""
    return [scored[int(rows[j])].copy() for j in inverse]


class NonFiniteError(FloatingPointError):
    """A loss, gradient or advantage is NaN or infinite: the update is stopped."""


def token_advantages(batch: Collated, step_advantages: np.ndarray) -> torch.Tensor:
    """(B, R) advantages over the response window: row b's response tokens carry the advantage
    of its step row, padding carries 0 (prompt tokens are outside the window: no loss at all)."""
    token_step = np.where(batch.response_mask.cpu().numpy(), batch.step_rows[:, None], -1)
    return torch.as_tensor(step_to_tokens(step_advantages, token_step))


def _is_peft(model: torch.nn.Module) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")


class Learner:
    """PPO updates on a causal LM.

    Args:
        model: the policy (shared with the HF backend, which then samples the updated weights).
        cfg: hyper-parameters.
        pad_token_id: padding id for collation.
        value_head: add a scalar value head on the last prompt token's hidden state.
        temperature: the sampling temperature of the rollouts (the ratio's distribution).
        value_outputs: outputs of the value head: 1, or 3 for HiPER's critic (V_low read at a
            position inside the response, V_high and V_term at the last prompt token).
        keep_reference: keep the reference policy even when ``kl_coef`` is 0 (the ``progress``
            token shaper reads its log-probs).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        cfg: LearnerConfig,
        pad_token_id: int,
        value_head: bool = False,
        temperature: float = 1.0,
        value_outputs: int = 1,
        keep_reference: bool = False,
        lr_schedule: LRSchedule | None = None,
    ):
        self.model = model
        self.cfg = cfg
        # Learning-rate multiplier per update() call (None: constant, the update is unchanged).
        self.lr_schedule = lr_schedule or LRSchedule()
        self.temperature = float(temperature)
        self.pad_token_id = int(pad_token_id)
        self.device = next(model.parameters()).device
        hidden = (
            model.config.hidden_size
            if hasattr(model, "config")
            else model.get_base_model().config.hidden_size
        )
        if value_outputs not in (1, 3):
            raise ValueError(f"value_outputs must be 1 or 3, got {value_outputs}")
        self.value_head = (
            torch.nn.Linear(hidden, value_outputs).to(self.device) if value_head else None
        )
        if self.value_head is not None:
            torch.nn.init.zeros_(self.value_head.weight)
            torch.nn.init.zeros_(self.value_head.bias)
        self.reference: torch.nn.Module | None = None
        if (cfg.kl_coef > 0 or keep_reference) and not _is_peft(model):
            self.reference = copy.deepcopy(model).eval()
            for p in self.reference.parameters():
                p.requires_grad_(False)
        groups = [{"params": [p for p in model.parameters() if p.requires_grad], "lr": cfg.lr}]
        if self.value_head is not None:
            groups.append(
                {"params": list(self.value_head.parameters()), "lr": cfg.value_lr or cfg.lr}
            )
        self.optimizer = torch.optim.AdamW(
            groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay
        )
        self.updates = 0
        # Per-update token-level inputs (set by :meth:`update`, read by :meth:`_micro_loss`).
        self._token_adv: Sequence[np.ndarray] | None = None
        self._loss_masks: Sequence[np.ndarray] | None = None
        self._value_rows: _ValueRows | None = None

    def lr_factor(self) -> float:
        """The schedule's multiplier for the next update (1 with the default constant schedule)."""
        return self.lr_schedule.factor(self.updates)

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

    # -- no-grad passes ------------------------------------------------------------------------
    def _scoring_model(self, reference: bool):
        """The model to score with and the context to score in: the policy, or the reference
        (the LoRA base with adapters disabled, else the frozen copy when there is one)."""
        if reference and _is_peft(self.model):
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
        with self.autocast():
            for idx in self._micro_batches(seqs, np.arange(n)):
                b = collate([seqs[i] for i in idx], self.pad_token_id).to(self.device)
                P = b.prompt_width
                out = self.model(
                    input_ids=b.input_ids[:, :P],
                    attention_mask=b.attention_mask[:, :P],
                    position_ids=b.position_ids[:, :P],
                    use_cache=False,
                    logits_to_keep=1,
                    output_hidden_states=True,
                )
                if values is not None:
                    values[idx] = (
                        self.value_head(out.hidden_states[-1][:, -1, :].float())[:, 0].cpu().numpy()
                    )
                if embedding_layer is not None:
                    h = out.hidden_states[embedding_layer][:, -1, :].float().cpu().numpy()
                    if embs is None:
                        embs = np.zeros((n, h.shape[1]), np.float32)
                    embs[idx] = h
        return values, embs

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
            if self.reference is None and not _is_peft(self.model):
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
    def hiper_values(self, seqs: Sequence[StepSequence], low_pos: Sequence[int]) -> np.ndarray:
        """(N, 3) critic values of HiPER's three heads: V_low at response position
        ``low_pos[i]`` (the value of the state before that token; 0: the last prompt token),
        V_high and V_term at the last prompt token."""
        if self.value_head is None or self.value_head.out_features != 3:
            raise ValueError("HiPER values need Learner(value_head=True, value_outputs=3)")
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

    # -- the update ----------------------------------------------------------------------------
    def update(
        self,
        seqs: Sequence[StepSequence],
        step_advantages: np.ndarray,
        *,
        returns: np.ndarray | None = None,
        old_values: np.ndarray | None = None,
        seed: int = 0,
        token_advantages: Sequence[np.ndarray] | None = None,
        loss_masks: Sequence[np.ndarray] | None = None,
        value_weights: np.ndarray | None = None,
        value_pos: Sequence[int] | None = None,
    ) -> dict[str, float]:
        """PPO epochs over ``seqs``; ``step_advantages[row]`` is the advantage of step row ``row``
        (``returns``/``old_values`` likewise, for the value head). Returns mean metrics.

        ``token_advantages[i]`` (one per response token of ``seqs[i]``) replaces the broadcast
        step advantage (token shapers, HiPER's span routing); ``loss_masks[i]`` keeps only some
        response tokens in the policy loss. With a 3-output value head (HiPER), ``returns`` and
        ``old_values`` are (N, 3), ``value_weights`` (N, 3) marks which heads train on which rows
        and ``value_pos[i]`` is the response position of ``seqs[i]``'s V_low."""
        adv = np.asarray(step_advantages, dtype=np.float32)
        if not np.isfinite(adv).all():
            raise NonFiniteError("non-finite step advantages: the update is skipped")
        if self.value_head is not None and returns is None:
            raise ValueError("the learner has a value head: pass returns (value targets)")
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
        self._token_adv, self._loss_masks = token_advantages, loss_masks
        self._value_rows = _ValueRows.make(self.value_head, seqs, returns, value_weights, value_pos)
        try:
            return self._epochs(seqs, adv, returns, old_values, seed)
        finally:
            self._token_adv = self._loss_masks = self._value_rows = None

    def _apply_lr_schedule(self) -> None:
        """Set this update's learning rates from the schedule (no-op when constant)."""
        if self.lr_schedule.is_constant:
            return
        factor = self.lr_factor()
        for group in self.optimizer.param_groups:
            # The base rate travels in the optimizer state (as torch's schedulers keep it),
            # so a resumed run scales the same base.
            group["lr"] = group.setdefault("initial_lr", group["lr"]) * factor

    def _epochs(self, seqs, adv, returns, old_values, seed) -> dict[str, float]:
        cfg = self.cfg
        ref = self.logprobs(seqs, reference=True) if cfg.kl_coef > 0 else None
        self._apply_lr_schedule()
        rng = np.random.default_rng(seed)
        self.model.train()
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        for _epoch in range(cfg.epochs):
            perm = rng.permutation(len(seqs))
            for start in range(0, len(perm), cfg.minibatch_size):
                mb = perm[start : start + cfg.minibatch_size]
                stats = self._minibatch_step(seqs, mb, adv, ref, returns, old_values)
                for k, v in stats.items():
                    sums[k] = sums.get(k, 0.0) + v
                    counts[k] = counts.get(k, 0) + 1
        self.updates += 1
        self._check_parameters()
        sums["lr"], counts["lr"] = self.optimizer.param_groups[0]["lr"], 1
        # Means over the mini-batches that computed each term (all-zero-advantage ones skip the loss).
        return {k: v / counts[k] for k, v in sums.items()}

    def _check_parameters(self) -> None:
        """Raise :class:`NonFiniteError` when an optimiser step left a non-finite weight (a finite
        but huge learning rate does that); the caller keeps the last good checkpoint."""
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        with torch.no_grad():
            ok = torch.stack([torch.isfinite(p).all() for p in params]).all()
        if not bool(ok):
            raise NonFiniteError(
                f"non-finite weights after update {self.updates} (learning rate {self.cfg.lr}): "
                "training is stopped"
            )

    def _minibatch_step(self, seqs, mb, adv, ref, returns, old_values) -> dict[str, float]:
        cfg = self.cfg
        denom = self._normaliser([len(seqs[i].response_ids) for i in mb])
        self.optimizer.zero_grad(set_to_none=True)
        acc: dict[str, float] = {}
        value_denom = max(len(mb), 1)
        if self._value_rows is not None:
            value_denom = self._value_rows.denominators(seqs, mb)
        if self._skips_zero_advantages():
            # Steps whose advantage is exactly 0 add nothing to the loss or its gradient; skip
            # their forward/backward. The normaliser above still counts them, so the update is
            # identical to processing them.
            if self._token_adv is not None:
                mb = np.asarray([i for i in mb if np.any(self._token_adv[i])], dtype=np.int64)
            else:
                mb = np.asarray([i for i in mb if adv[seqs[i].step_row] != 0.0], dtype=np.int64)
        processed = len(mb)
        for idx in self._micro_batches(seqs, mb):
            loss, terms, st = self._micro_loss(
                seqs, idx, adv, ref, returns, old_values, denom, value_denom
            )
            if not torch.isfinite(loss):
                self.optimizer.zero_grad(set_to_none=True)
                raise NonFiniteError(
                    f"non-finite loss ({float(loss.detach())}) in update {self.updates}: the update is stopped"
                )
            loss.backward()
            w = len(idx) / len(mb)
            for k, val in terms.items():
                acc[k] = acc.get(k, 0.0) + float(val)
            for k, val in st.items():
                acc[k] = acc.get(k, 0.0) + float(val) * w
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        for p in params:  # a mini-batch of zero advantages still takes Adam's (momentum) step
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        gnorm = torch.nn.utils.clip_grad_norm_(
            params, cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
        )
        if not math.isfinite(float(gnorm)):
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteError(
                f"non-finite gradient norm in update {self.updates}: the update is stopped"
            )
        self.optimizer.step()
        acc["grad_norm"] = float(gnorm)
        acc["sequences_processed"] = float(processed)
        return acc

    def _normaliser(self, response_lengths: Sequence[int]) -> float:
        """The mini-batch's loss denominator: its response tokens, or its sequences with a response."""
        if self.cfg.loss_agg not in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
            normaliser(
                torch.zeros(1, 1, dtype=torch.bool), self.cfg.loss_agg
            )  # raises naming the option
        if self.cfg.loss_agg == "token-mean":
            return float(sum(response_lengths))
        return float(sum(1 for m in response_lengths if m > 0))

    def _skips_zero_advantages(self) -> bool:
        """Whether zero-advantage steps can be left out of the forward/backward (no other term)."""
        return self.cfg.entropy_coef == 0 and self.cfg.kl_coef == 0 and self.value_head is None

    def _micro_loss(
        self, seqs, idx, adv, ref, returns, old_values, denom: float, value_denom: float
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """One micro-batch's share of the mini-batch loss (normalised by the whole mini-batch's
        ``denom``/``value_denom``), its detached terms, and the PPO diagnostics of its tokens."""
        cfg = self.cfg
        batch = collate([seqs[i] for i in idx], self.pad_token_id).to(self.device)
        if self._token_adv is None:
            tok_adv = token_advantages(batch, adv).to(self.device)
        else:
            tok_adv = self._per_token(self._token_adv, idx, batch, torch.float32)
        mask = batch.response_mask
        pg_mask = mask
        if self._loss_masks is not None:
            pg_mask = mask & self._per_token(self._loss_masks, idx, batch, torch.bool)
        vr = self._value_rows
        cols = None
        if vr is not None:
            cols = torch.as_tensor(
                [batch.prompt_width - 1 + vr.pos[i] for i in idx], device=self.device
            )
        with self.autocast():
            fo = response_forward(
                self.model,
                batch,
                self.temperature,
                want_entropy=True,
                want_hidden=self.value_head is not None,
                hidden_cols=cols,
            )
        pg, st = ppo_clip_loss(
            fo.logprobs, batch.old_logprobs, tok_adv, pg_mask, cfg.clip_low, cfg.clip_high
        )
        policy = aggregate(pg, mask, cfg.loss_agg, denom)
        loss = policy
        ent = aggregate(fo.entropy, mask, cfg.loss_agg, denom)
        if cfg.entropy_coef:
            loss = loss - cfg.entropy_coef * ent
        kl = torch.zeros((), device=loss.device)
        if ref is not None:
            ref_lp = torch.zeros_like(fo.logprobs)
            for k, i in enumerate(idx):
                n = len(seqs[i].response_ids)
                ref_lp[k, :n] = torch.as_tensor(ref[i], device=self.device)
            kl = aggregate(
                kl_penalty(fo.logprobs, ref_lp, mask, cfg.kl_estimator),
                mask,
                cfg.loss_agg,
                denom,
            )
            loss = loss + cfg.kl_coef * kl
        vl = torch.zeros((), device=loss.device)
        if vr is not None:
            vl = vr.loss(self._three_values(fo), batch.step_rows, old_values, value_denom, cfg)
            loss = loss + cfg.value_coef * vl
        elif self.value_head is not None:
            v = self.value_head(fo.last_hidden.float())[:, 0]
            rows = batch.step_rows
            tgt = torch.as_tensor(returns[rows], dtype=torch.float32, device=self.device)
            old_v = (
                torch.as_tensor(old_values[rows], dtype=torch.float32, device=self.device)
                if old_values is not None
                else v.detach()
            )
            vl = value_loss(v, old_v, tgt, cfg.value_clip).sum() / value_denom
            loss = loss + cfg.value_coef * vl
        terms = {
            "loss": loss.detach(),
            "policy_loss": policy.detach(),
            "entropy": ent.detach(),
            "kl_ref": kl.detach(),
            "value_loss": vl.detach(),
        }
        return loss, terms, st

    def _per_token(self, per_seq, idx, batch: Collated, dtype) -> torch.Tensor:
        """(B, R) tensor of per-sequence token arrays (0 / False on padding)."""
        out = np.zeros((len(idx), batch.response_width))
        for k, i in enumerate(idx):
            out[k, : len(per_seq[i])] = per_seq[i]
        return torch.as_tensor(out, dtype=dtype, device=self.device)

    def _micro_batches(self, seqs: Sequence[StepSequence], rows: np.ndarray) -> list[list[int]]:
        """Split ``rows`` into micro-batches of similar length (less padding), at most
        ``micro_batch_size`` sequences and (if set) ``micro_batch_tokens`` padded tokens each."""
        order = sorted(
            (int(i) for i in rows),
            key=lambda i: len(seqs[i].prompt_ids) + len(seqs[i].response_ids),
        )
        size = max(1, self.cfg.micro_batch_size)
        budget = self.cfg.micro_batch_tokens
        out: list[list[int]] = []
        cur: list[int] = []
        P = R = 0
        for i in order:
            p, r = len(seqs[i].prompt_ids), max(1, len(seqs[i].response_ids))
            width = max(P, p) + max(R, r)
            if cur and (
                len(cur) >= size or (budget is not None and (len(cur) + 1) * width > budget)
            ):
                out.append(cur)
                cur, P, R = [], 0, 0
                width = p + r
            cur.append(i)
            P, R = max(P, p), max(R, r)
        if cur:
            out.append(cur)
        return out

    # -- checkpoints ---------------------------------------------------------------------------
    def trained_modules(self) -> torch.nn.ModuleDict:
        """The trained modules under stable names (``policy.*``, ``value_head.*``): what the
        sharded checkpoint saves and loads."""
        mods = {"policy": self.model}
        if self.value_head is not None:
            mods["value_head"] = self.value_head
        return torch.nn.ModuleDict(mods)

    def state_dict(self) -> dict[str, Any]:
        trainable = {k: v for k, v in self.model.named_parameters() if v.requires_grad}
        return {
            "model": {k: v.detach().cpu().clone() for k, v in trainable.items()},
            "value_head": None if self.value_head is None else self.value_head.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load a :meth:`state_dict` exactly, or raise ``StateMismatch`` and change nothing
        (:func:`~agentrl.learner.state_check.check_learner_state`: names, shapes, dtypes, the
        optimiser's structure, finite numbers)."""
        check_learner_state(state, self.model, self.value_head, self.optimizer)
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for k, v in state["model"].items():
                params[k].copy_(v.to(params[k].device))
        if self.value_head is not None:
            self.value_head.load_state_dict(state["value_head"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state.get("updates", 0))


class _ValueRows:
    """HiPER's three-head value targets for one update: (N, 3) returns, which heads train on which
    rows (``weights``), and per sequence the response position of V_low (``pos``). Each head's
    loss is the mean over the mini-batch rows that train it (the reference's masked token-mean
    with one value token per turn); the three are summed (its high/term coefficients are 1)."""

    def __init__(self, returns: np.ndarray, weights: np.ndarray, pos: list[int]):
        self.returns, self.weights, self.pos = returns, weights, pos

    @classmethod
    def make(cls, head, seqs, returns, weights, pos) -> _ValueRows | None:
        if head is None or head.out_features == 1:
            return None
        R = np.asarray(returns, dtype=np.float32)
        if R.ndim != 2 or R.shape[1] != 3:
            raise ValueError(f"a 3-output value head needs (N, 3) returns, got {R.shape}")
        W = np.ones_like(R) if weights is None else np.asarray(weights, dtype=np.float32)
        if W.shape != R.shape:
            raise ValueError(f"value_weights has shape {W.shape}, expected {R.shape}")
        p = [0] * len(seqs) if pos is None else [int(x) for x in pos]
        if len(p) != len(seqs) or any(
            not 0 <= x < max(1, len(s.response_ids)) for x, s in zip(p, seqs)
        ):
            raise ValueError("value_pos needs one response position per sequence, inside it")
        return cls(R, W, p)

    def denominators(self, seqs, mb) -> np.ndarray:
        return self.row_denominators([seqs[i].step_row for i in mb])

    def row_denominators(self, rows) -> np.ndarray:
        """Per head, how many of the mini-batch's step ``rows`` train it (at least 1)."""
        return np.maximum(self.weights[np.asarray(rows, dtype=np.int64)].sum(0), 1.0)

    def with_dummy(self) -> _ValueRows:
        """The same rows with a V_low position for a sharded learner's dummy sequence."""
        return _ValueRows(self.returns, self.weights, [*self.pos, 0])

    def loss(self, pred, rows, old_values, denom, cfg) -> torch.Tensor:
        dev = pred.device
        tgt = torch.as_tensor(self.returns[rows], device=dev)
        w = torch.as_tensor(self.weights[rows], device=dev)
        old = (
            torch.as_tensor(np.asarray(old_values, np.float32)[rows], device=dev)
            if old_values is not None
            else pred.detach()
        )
        per = value_loss(pred, old, tgt, cfg.value_clip) * w
        return (per.sum(0) / torch.as_tensor(denom, dtype=per.dtype, device=dev)).sum()
