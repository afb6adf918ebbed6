"""The PPO learner: epochs of clipped policy-gradient updates over step sequences.

One :class:`Learner` owns the policy (a transformers model, optionally wrapped with LoRA), an
optional value head, the reference policy for the KL term and the optimiser (``trainer.optimizer``,
AdamW by default, built by :func:`~agentrl.learner.optim.build_optimizer`).

- Reference: with LoRA the reference is the same model with its adapters disabled (no second
  copy); otherwise a frozen copy of the initial weights, made only when ``kl_coef > 0``.
- Micro-batches: a mini-batch of ``minibatch_size`` sequences is processed in micro-batches of
  ``micro_batch_size`` whose gradients accumulate; every loss term is normalised by the
  mini-batch's token (or sequence) count, so the result equals one big-batch step.
- Precision: ``dtype="auto"`` runs the forward pass under bf16 autocast on GPUs that support it
  and in float32 on CPU; the master weights stay float32.
- Safety: a non-finite loss or gradient norm raises :class:`NonFiniteError` before the optimiser
  steps, so the weights are never corrupted.

The sharded learner (:class:`~agentrl.learner.fsdp.FSDPLearner`) is this class with its hooks
overridden where sharding differs: :meth:`_prepare_modules` (shard before the optimiser is
built), :meth:`_scoring_plan` (as many forwards on every rank), :meth:`_row_layout` (mini-batches
over the global rows) and :meth:`_gather` (metrics and failures over all ranks). The epochs, the
micro-batch loss, the optimiser step and the parameter check are written once, here.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from ..config import ConfigError, LearnerConfig, field_problems
from .capture import TokenCapture
from .corrections import correction_weights, kept_tokens, mismatch_metrics
from .forward import response_forward
from .losses import normaliser, value_loss
from .objective import policy_objective, token_metrics
from .optim import build_optimizer, scale_learning_rates
from .schedule import LRSchedule
from .scoring import ScoringPasses, is_peft
from .sequences import StepSequence, collate, collate_distinct
from .state_check import check_learner_state
from .update import (
    NonFiniteError,
    RowLayout,
    UpdateInputs,
    local_layout,
    per_token,
    token_advantages,
)
from .value_rows import ValueRows

__all__ = ["Learner", "LearnerConfig", "NonFiniteError", "token_advantages"]

_is_peft = is_peft  # the name tests and older callers import


class Learner(ScoringPasses):
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
        lr_schedule: learning-rate multiplier per :meth:`update` call (default: constant).
        entropy_schedule: the entropy bonus's multiplier per :meth:`update` call, over
            ``cfg.entropy_coef`` (default: constant).
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
        entropy_schedule: LRSchedule | None = None,
    ):
        checked = ("loss_agg", "loss_tokens", "kl_estimator", "old_logprobs", "correction")
        problems = field_problems(cfg, checked, "trainer.")
        problems += [f"trainer.{k} {m}" for k, m in cfg.offpolicy_checks()]
        if problems:  # a config made in Python, not checked by load_config
            raise ConfigError("invalid config: " + "; ".join(problems))
        self.model = model
        self.cfg = cfg
        self._objective_cfg = cfg  # cfg with this update's scheduled entropy bonus
        self.lr_schedule = lr_schedule or LRSchedule()
        self.entropy_schedule = entropy_schedule or LRSchedule()
        self.temperature = float(temperature)
        self.pad_token_id = int(pad_token_id)
        self.device = next(model.parameters()).device
        if value_outputs not in (1, 3):
            raise ValueError(f"value_outputs must be 1 or 3, got {value_outputs}")
        self.value_head = (
            torch.nn.Linear(self._hidden_size(), value_outputs).to(self.device)
            if value_head
            else None
        )
        if self.value_head is not None:
            torch.nn.init.zeros_(self.value_head.weight)
            torch.nn.init.zeros_(self.value_head.bias)
        self.reference: torch.nn.Module | None = None
        if (cfg.kl_coef > 0 or keep_reference) and not is_peft(model):
            self.reference = copy.deepcopy(model).eval()
            for p in self.reference.parameters():
                p.requires_grad_(False)
        self._shares_rows = not has_dropout(model)  # equal rows share a forward (_micro_loss)
        self._prepare_modules()
        groups = [{"params": [p for p in model.parameters() if p.requires_grad], "lr": cfg.lr}]
        if self.value_head is not None:
            groups.append(
                {"params": list(self.value_head.parameters()), "lr": cfg.value_lr or cfg.lr}
            )
        self.optimizer = build_optimizer(cfg, groups)
        self.updates = 0
        #: called after each micro-batch of an update with the micro-batches done so far and
        #: the share of the update done (a progress line; a signal's deadline may raise there)
        self.on_micro_batch: Callable[[int, float], None] | None = None
        self._progress = (0, 1, 0)  # this update: mini-batches done, their total, micro-batches
        #: set for one update to keep the per-token loss quantities of a few step rows
        #: (trajectory traces; :class:`~agentrl.learner.capture.TokenCapture`); ``None``: off
        self.capture: TokenCapture | None = None

    def lr_factor(self) -> float:
        """The schedule's multiplier for the next update (1 with the default constant schedule)."""
        return self.lr_schedule.factor(self.updates)

    def entropy_coef(self) -> float:
        """The entropy bonus's weight in the next update: ``cfg.entropy_coef`` times its
        schedule's factor (a resumed run continues the schedule: it counts updates)."""
        return self.cfg.entropy_coef * self.entropy_schedule.factor(self.updates)

    # -- where a sharded learner differs (here: one process holds every row) --------------------
    def _prepare_modules(self) -> None:
        """Called once the value head and reference exist, before the optimiser is built over
        the parameters: the sharded learner shards the modules here."""

    def _row_layout(self, seqs: Sequence[StepSequence], inp: UpdateInputs) -> RowLayout:
        """The rows the mini-batches are drawn from: here, the sequences."""
        return local_layout(seqs, inp)

    def _gather(self, stats: dict[str, float], problem: str) -> tuple[dict[str, float], list[str]]:
        """``stats`` summed over the ranks and the ranks' problems (``""``: none): here, as given."""
        return stats, [problem] if problem else []

    def _gather_tokens(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Per-token arrays concatenated over the ranks (for percentiles): here, as given."""
        return arrays

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
        response tokens in the loss: with ``loss_tokens="sampled"`` (default) the others leave
        every term and every denominator (the count of tokens in the loss), as in HiPER's own
        trainer; with ``"all"`` they leave the policy-gradient term only and stay counted. With
        a 3-output value head (HiPER), ``returns`` and ``old_values`` are (N, 3),
        ``value_weights`` (N, 3) marks which heads train on which rows and ``value_pos[i]`` is
        the response position of ``seqs[i]``'s V_low.

        Under the sharded learner ``seqs`` are this rank's and carry global step rows;
        ``step_advantages``, ``returns`` and ``old_values`` are indexed by global row."""
        if self.value_head is not None and returns is None:
            raise ValueError("the learner has a value head: pass returns (value targets)")
        inp = UpdateInputs.checked(
            seqs,
            step_advantages,
            token_advantages=token_advantages,
            loss_masks=loss_masks,
            returns=returns,
            old_values=old_values,
            value_rows=ValueRows.make(self.value_head, seqs, returns, value_weights, value_pos),
            mode=self.cfg.loss_tokens,
        )
        return self._epochs(seqs, inp, seed)

    def _epochs(
        self, seqs: Sequence[StepSequence], inp: UpdateInputs, seed: int
    ) -> dict[str, float]:
        cfg = self.cfg
        layout = self._row_layout(seqs, inp)
        inp = inp.with_reference(self.logprobs(seqs, reference=True) if cfg.kl_coef > 0 else None)
        offpolicy: dict[str, float] = {}
        if cfg.old_logprobs == "learner":
            inp, offpolicy = self._recompute_old(seqs, inp)
        if not self.lr_schedule.is_constant:
            scale_learning_rates(self.optimizer, self.lr_factor())
        entropy_coef = self.entropy_coef()
        self._objective_cfg = (
            cfg if entropy_coef == cfg.entropy_coef else replace(cfg, entropy_coef=entropy_coef)
        )
        rng = np.random.default_rng(seed)
        self.model.train()
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        tokens: dict[str, float] = {}  # token sums of the diagnostics, over the whole update
        total = cfg.epochs * max(1, -(-layout.n // cfg.minibatch_size))
        self._progress = (0, total, 0)
        for _epoch in range(cfg.epochs):
            perm = rng.permutation(layout.n)
            for start in range(0, layout.n, cfg.minibatch_size):
                mb = perm[start : start + cfg.minibatch_size]
                stats, tok = self._minibatch_step(seqs, mb, layout, inp)
                done, _, micro = self._progress
                self._progress = (done + 1, total, micro)
                for k, v in stats.items():
                    sums[k] = sums.get(k, 0.0) + v
                    counts[k] = counts.get(k, 0) + 1
                for k, v in tok.items():
                    tokens[k] = tokens.get(k, 0.0) + v
        self.updates += 1
        self._check_parameters()
        sums["lr"], counts["lr"] = self.optimizer.param_groups[0]["lr"], 1
        if not self.entropy_schedule.is_constant:
            sums["entropy_coef"], counts["entropy_coef"] = entropy_coef, 1
        # Loss terms: means over the mini-batches that computed them (all-zero-advantage ones
        # skip the loss); per-token diagnostics: token-weighted means over the update.
        return {**{k: v / counts[k] for k, v in sums.items()}, **token_metrics(tokens), **offpolicy}

    def _recompute_old(
        self, seqs: Sequence[StepSequence], inp: UpdateInputs
    ) -> tuple[UpdateInputs, dict[str, float]]:
        """``trainer.old_logprobs=learner``: π_old from the learner's own no-grad forward pass
        (constrained steps renormalised over their trie, as in the loss), the correction's weights
        against the engine's log-probs (the behaviour policy), and the ``offpolicy/*`` metrics of
        the mismatch on the tokens in the loss, over all ranks."""
        cfg = self.cfg
        old = self.logprobs(seqs)
        engine = [np.asarray(s.old_logprobs, np.float64) for s in seqs]
        cw = correction_weights(
            cfg.correction,
            old,
            engine,
            inp.keep,
            cap=cfg.correction_cap,
            icepop_band=(cfg.icepop_low, cfg.icepop_high),
            seq_band=(cfg.seq_mask_low, cfg.seq_mask_high),
            decoupled_cap=cfg.decoupled_cap,
        )
        arrays = {"delta": kept_tokens([o - e for o, e in zip(old, engine)], inp.keep)}
        if cw is not None:
            for k in ("weights", "truncated", "masked"):
                arrays[k] = kept_tokens(getattr(cw, k), inp.keep)
        got = self._gather_tokens(arrays)
        metrics = mismatch_metrics(
            got["delta"],
            got.get("weights"),
            got.get("truncated") if cfg.correction == "tis" else None,
            got.get("masked") if cfg.correction not in ("none", "tis") else None,
        )
        return inp.with_old(old, None if cw is None else cw.weights), metrics

    def _minibatch_step(
        self, seqs: Sequence[StepSequence], mb: np.ndarray, layout: RowLayout, inp: UpdateInputs
    ) -> tuple[dict[str, float], dict[str, float]]:
        """One optimiser step on the mini-batch of rows ``mb`` (this rank runs those it holds):
        its loss terms, gradient norm and count, and the token sums of its diagnostics."""
        denom = self._normaliser(layout.lengths[mb])
        value_denom = max(len(mb), 1)
        if inp.value_rows is not None:  # HiPER's heads: the rows that train each
            value_denom = inp.value_rows.row_denominators(layout.step_row[mb])
        if self._skips_zero_advantages():
            # Steps whose advantage is exactly 0 add nothing to the loss or its gradient; skip
            # their forward/backward. The normaliser above still counts them, so the update is
            # identical to processing them.
            mb = mb[layout.active[mb]]
        processed = len(mb)
        local = [int(layout.local[r]) for r in mb if layout.local[r] >= 0]
        self.optimizer.zero_grad(set_to_none=True)
        ext, mbs, real = self._scoring_plan(seqs, local)
        acc: dict[str, float] = {}  # loss terms (micro-batch shares add up) and "tok/" token sums
        bad = ""
        for j, idx in enumerate(mbs):
            loss, terms, tok = self._micro_loss(ext, idx, inp, denom, value_denom)
            if j >= real:
                loss = loss * 0.0  # a padding micro-batch: collectives only, no gradient
            elif not torch.isfinite(loss):
                bad = bad or f"non-finite loss ({float(loss.detach())})"
            loss.backward()
            if j >= real:
                continue
            if self.on_micro_batch is not None:
                done, total, micro = self._progress
                self._progress = (done, total, micro + 1)
                self.on_micro_batch(micro + 1, (done + (j + 1) / real) / total)
            for k, val in [*terms.items(), *((f"tok/{k}", v) for k, v in tok.items())]:
                acc[k] = acc.get(k, 0.0) + float(val)
        total, problems = self._gather(acc, bad)
        if problems:
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteError(
                f"{'; '.join(problems)} in update {self.updates}: the update is stopped"
            )
        stats = {k: v for k, v in total.items() if not k.startswith("tok/")}
        stats["grad_norm"] = self._optimizer_step()
        stats["sequences_processed"] = float(processed)
        return stats, {k[4:]: v for k, v in total.items() if k.startswith("tok/")}

    def _optimizer_step(self) -> float:
        """Clip the gradient norm (over all shards), step, and return the norm before clipping."""
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        for p in params:  # a mini-batch of zero advantages still takes Adam's (momentum) step
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        max_norm = self.cfg.max_grad_norm if self.cfg.max_grad_norm > 0 else float("inf")
        gnorm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        gnorm = float(gnorm.full_tensor() if hasattr(gnorm, "full_tensor") else gnorm)
        if not math.isfinite(gnorm):
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteError(
                f"non-finite gradient norm in update {self.updates}: the update is stopped"
            )
        self.optimizer.step()
        return gnorm

    def _check_parameters(self) -> None:
        """Raise :class:`NonFiniteError` when an optimiser step left a non-finite weight (a finite
        but huge learning rate does that) on any rank; the caller keeps the last good checkpoint."""
        local = [p.to_local() if hasattr(p, "to_local") else p
                 for g in self.optimizer.param_groups for p in g["params"]]  # fmt: skip
        with torch.no_grad():
            flags = [torch.isfinite(t).all() for t in local if t.numel()]
            ok = not flags or bool(torch.stack(flags).all())
        _, problems = self._gather({}, "" if ok else "non-finite weights")
        if problems:
            raise NonFiniteError(
                f"{'; '.join(problems)} after update {self.updates} (learning rate {self.cfg.lr}): "
                "training is stopped"
            )

    def _normaliser(self, response_lengths: Sequence[int]) -> float:
        """The mini-batch's loss denominator from its rows' counts of tokens in the loss: their
        sum (token-mean), or the number of rows with at least one (the seq-mean variants)."""
        if self.cfg.loss_agg not in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
            normaliser(
                torch.zeros(1, 1, dtype=torch.bool), self.cfg.loss_agg
            )  # raises naming the option
        if self.cfg.loss_agg == "token-mean":
            return float(sum(int(n) for n in response_lengths))
        return float(sum(1 for m in response_lengths if m > 0))

    def _skips_zero_advantages(self) -> bool:
        """Whether zero-advantage steps can be left out of the forward/backward (no other term)."""
        return self.cfg.entropy_coef == 0 and self.cfg.kl_coef == 0 and self.value_head is None

    def _micro_loss(
        self,
        seqs: Sequence[StepSequence],
        idx: list[int],
        inp: UpdateInputs,
        denom: float,
        value_denom: float | np.ndarray,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, float]]:
        """The micro-batch ``idx`` of ``seqs``'s share of the mini-batch loss (normalised by the
        whole mini-batch's ``denom``/``value_denom``), its detached terms, and the token sums of
        its diagnostics (:func:`~agentrl.learner.objective.policy_objective`)."""
        cfg = self.cfg
        vr = inp.value_rows
        micro = [seqs[i] for i in idx]
        # Equal rows (a group's rollouts taking the same action in the same state) share one
        # forward pass; indexing its outputs back to every row gives each row its own loss terms
        # and the same gradient as separate passes. Not with dropout (each row would draw its own
        # mask) or HiPER's heads (their V_low column is per row).
        inverse = None
        if self._shares_rows and vr is None:
            fwd, batch, inverse = collate_distinct(micro, self.pad_token_id)
            fwd = fwd.to(self.device)
            batch = fwd if inverse is None else batch.to(self.device)
        else:
            fwd = batch = collate(micro, self.pad_token_id).to(self.device)
        width, dev = batch.response_width, self.device
        if inp.token_adv is None:
            tok_adv = token_advantages(batch, inp.adv).to(dev)
        else:
            tok_adv = per_token(inp.token_adv, idx, width, torch.float32, dev)
        # The tokens in the loss (forced tokens and HiPER's masked-out spans out, by default) are
        # masked before any term is formed: the others get a gradient of exactly 0.
        mask = batch.response_mask & per_token(inp.keep, idx, width, torch.bool, dev)
        pg_mask = mask
        if inp.loss_masks is not None:
            pg_mask = mask & per_token(inp.loss_masks, idx, width, torch.bool, dev)
        cols = None
        if vr is not None:  # V_low's column (a sharded learner's padding sequence: position 0)
            pos = [vr.pos[i] if i < len(vr.pos) else 0 for i in idx]
            cols = torch.as_tensor([batch.prompt_width - 1 + p for p in pos], device=dev)
        with self.autocast():
            fo = response_forward(self.model, fwd, self.temperature, want_entropy=True,
                                  want_hidden=self.value_head is not None,
                                  hidden_cols=cols).rows_of(inverse)  # fmt: skip
        ref_lp = None if inp.ref is None else per_token(inp.ref, idx, width, torch.float32, dev)
        # π_old: the engine's sampling log-probs, or the learner's recomputed ones (old_logprobs)
        old_lp = batch.old_logprobs
        if inp.old is not None:
            old_lp = per_token(inp.old, idx, width, torch.float32, dev)
        pg_w = None if inp.pg_weight is None else per_token(inp.pg_weight, idx, width,
                                                            torch.float32, dev)  # fmt: skip
        loss, terms, tok = policy_objective(fo.logprobs, fo.entropy, old_lp, tok_adv,
                                           mask, pg_mask, ref_lp, self._objective_cfg, denom,
                                           pg_w)  # fmt: skip
        if self.capture is not None:  # trajectory traces: the chosen rows' per-token values
            self.capture.take(batch.step_rows, batch.response_mask, fo.logprobs, old_lp, tok_adv,
                              pg_mask)  # fmt: skip
        vl = torch.zeros((), device=loss.device)
        if vr is not None:
            vl = vr.loss(self._three_values(fo), batch.step_rows, inp.old_values, value_denom, cfg)
            loss = loss + cfg.value_coef * vl
        elif self.value_head is not None:
            vl = self._value_loss(fo.last_hidden, batch.step_rows, inp, value_denom)
            loss = loss + cfg.value_coef * vl
        tok["response_tokens"] = float(batch.response_mask.sum())
        tok["forward_rows"], tok["rows"] = float(len(fwd.step_rows)), float(len(micro))
        return loss, {"loss": loss.detach(), **terms, "value_loss": vl.detach()}, tok

    def _value_loss(self, hidden, rows, inp: UpdateInputs, value_denom) -> torch.Tensor:
        """The scalar value head's loss on the last prompt token's ``hidden`` state."""
        v = self.value_head(hidden.float())[:, 0]
        tgt = torch.as_tensor(inp.returns[rows], dtype=torch.float32, device=self.device)
        old_v = (
            torch.as_tensor(inp.old_values[rows], dtype=torch.float32, device=self.device)
            if inp.old_values is not None
            else v.detach()
        )
        return value_loss(v, old_v, tgt, self.cfg.value_clip).sum() / value_denom

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


_DROPOUT_KEYS = ("attention_dropout", "hidden_dropout", "dropout", "attn_pdrop", "resid_pdrop",
                 "embd_pdrop", "hidden_dropout_prob", "attention_probs_dropout_prob")  # fmt: skip


def has_dropout(model: torch.nn.Module) -> bool:
    """Whether a training-mode forward of ``model`` is random: a dropout module with ``p > 0``
    (LoRA's included) or a dropout rate in its Hugging Face config (attention dropout is a
    functional argument there, not a module)."""
    if any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0
           for m in model.modules()):  # fmt: skip
        return True
    config = getattr(model, "config", None)
    return any(float(getattr(config, k, 0.0) or 0.0) > 0 for k in _DROPOUT_KEYS)
