"""The PPO learner sharded with FSDP2 (``torch.distributed.fsdp.fully_shard``) across ranks.

:class:`FSDPLearner` is :class:`~agentrl.learner.Learner` with its modules sharded: each
decoder layer and the root of the policy (and of the frozen reference and the value head when
used) are ``fully_shard`` units over all ranks; parameters, gradients and AdamW states are
DTensors holding ``1/world`` of each tensor. The loss is the learner's own
(:meth:`Learner._micro_loss`); what changes is where the rows are:

- every rank holds the step sequences of its own task groups (``seqs[k].step_row`` is the row in
  the *global* step batch, ``step_advantages`` is the global array);
- the mini-batches are those one process would draw: one permutation of the global rows from the
  update's seed; each rank processes the rows of a mini-batch it owns, and every loss term is
  normalised by the *global* mini-batch's token/sequence count (gathered), so the gradients
  summed over ranks (FSDP's reduce-scatter, divide factor 1) are the single-process gradient;
- ranks own different numbers of rows, but FSDP's forward and backward are collectives: each
  rank runs the same number of micro-batches, padding with a zero-weighted dummy micro-batch;
- gradient clipping uses the norm over all shards (``clip_grad_norm_`` on DTensors); a
  non-finite loss on any rank stops the update on every rank, with the rank named;
- mixed precision on GPU: bf16 parameters in compute, fp32 gradient reduction and fp32 master
  weights (``MixedPrecisionPolicy``); on CPU everything is fp32.

Differences from one process, by construction: the order in which per-row gradient
contributions are summed (micro-batches differ, then the cross-rank sum), so results agree up to
float rounding (tests/train/test_distributed.py states the tolerance).

After an update the rollout engine needs the new weights: :meth:`FSDPLearner.sync_to` gathers
full tensors (all ranks take part) and copies them into an unsharded replica of the policy
that each rank's generation backend samples from; with LoRA only the adapter tensors travel.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Sequence

import numpy as np
import torch

from agentrl import distributed as D

from .learner import Learner, LearnerConfig, NonFiniteError, _is_peft
from .sequences import StepSequence, collate
from .state_check import check_learner_state

__all__ = ["FSDPLearner", "decoder_layers", "shard_model"]


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks of a HF causal LM (peft-wrapped or not): the FSDP units.

    Found by the classes the model lists in ``_no_split_modules`` (e.g. ``Qwen2DecoderLayer``),
    the same blocks HF's own device placement never splits.
    """
    base = model.get_base_model() if _is_peft(model) else model
    names = set(getattr(base, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(
            f"{type(base).__name__} lists no _no_split_modules: cannot find its decoder layers "
            "to shard; pass layers= explicitly"
        )
    return layers


def shard_model(
    model: torch.nn.Module,
    *,
    mp_policy=None,
    layers: Sequence[torch.nn.Module] | None = None,
) -> torch.nn.Module:
    """``fully_shard`` each decoder layer, then the root; gradients are summed over ranks."""
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    # HF models return logits as views; FSDP2 warns on every forward that an in-place op on
    # them would skip its hook. The learner never modifies model outputs in place.
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
    mp_policy = mp_policy or MixedPrecisionPolicy()
    for layer in layers if layers is not None else decoder_layers(model):
        fully_shard(layer, mp_policy=mp_policy)
    fully_shard(model, mp_policy=mp_policy)
    for m in model.modules():
        if isinstance(m, FSDPModule):
            # Each rank's loss is its share of the global mini-batch loss (global normaliser):
            # the gradient is the sum over ranks, not FSDP's default mean. Plain SUM
            # collectives (no NCCL PreMulSum), which gloo supports too.
            m.set_gradient_divide_factor(1.0)
            m.set_force_sum_reduction_for_comms(True)
    return model


@torch.no_grad()
def _broadcast_from_rank0(module: torch.nn.Module) -> None:
    """Make every rank start from rank 0's weights (random LoRA/value-head inits included)."""
    import torch.distributed as dist

    for t in list(module.parameters()) + list(module.buffers()):
        dist.broadcast(t.data, src=0)


class FSDPLearner(Learner):
    """PPO updates with the policy sharded over all ranks (see the module docstring).

    Args:
        model: the policy, identical on every rank (rank 0's weights are broadcast first). It
            is sharded in place; keep an unsharded replica for generation (:meth:`sync_to`).
        cfg, pad_token_id, value_head, temperature, value_outputs, keep_reference, lr_schedule:
            as :class:`Learner`.
        mixed_precision: bf16 compute with fp32 reduction; ``None``: on when ``cfg.dtype`` is
            ``auto``/``bfloat16`` and the device is a GPU with bf16.
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
        lr_schedule=None,
        mixed_precision: bool | None = None,
    ):
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "FSDPLearner needs a process group (launch with torchrun, or "
                "agentrl.distributed.init_single_rank() for a world of one); "
                "use Learner in a plain process"
            )
        from torch.distributed.fsdp import MixedPrecisionPolicy

        super().__init__(
            model,
            cfg,
            pad_token_id,
            value_head=value_head,
            temperature=temperature,
            value_outputs=value_outputs,
            keep_reference=keep_reference,
            lr_schedule=lr_schedule,
        )
        dev = self.device
        if mixed_precision is None:
            mixed_precision = (
                cfg.dtype in ("auto", "bfloat16")
                and dev.type == "cuda"
                and torch.cuda.is_bf16_supported()
            )
        self.mixed_precision = bool(mixed_precision)
        mp = (
            MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            if self.mixed_precision
            else MixedPrecisionPolicy()
        )
        _broadcast_from_rank0(model)
        shard_model(model, mp_policy=mp)
        if self.reference is not None:
            _broadcast_from_rank0(self.reference)
            shard_model(self.reference, mp_policy=mp)
        if self.value_head is not None:
            _broadcast_from_rank0(self.value_head)
            shard_model(self.value_head, mp_policy=MixedPrecisionPolicy(), layers=())
        # The parameters are new (DTensor) objects now: the optimiser is rebuilt over them.
        groups = [{"params": [p for p in model.parameters() if p.requires_grad], "lr": cfg.lr}]
        if self.value_head is not None:
            groups.append(
                {"params": list(self.value_head.parameters()), "lr": cfg.value_lr or cfg.lr}
            )
        self.optimizer = torch.optim.AdamW(
            groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay
        )

    # -- helpers -------------------------------------------------------------------------------
    def autocast(self):
        if self.mixed_precision:  # FSDP already computes in bf16
            return contextlib.nullcontext()
        return super().autocast()

    def _max_over_ranks(self, n: int) -> int:
        import torch.distributed as dist

        t = torch.tensor([int(n)], dtype=torch.int64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def _dummy(self, step_row: int = 0) -> StepSequence:
        """A one-token sequence run (with weight 0) by a rank with fewer micro-batches."""
        return StepSequence([self.pad_token_id], [self.pad_token_id], [0.0], step_row)

    def _scoring_plan(
        self, seqs: Sequence[StepSequence], rows
    ) -> tuple[list, list[list[int]], int]:
        """``seqs`` plus a dummy at index ``len(seqs)``, this rank's micro-batches of ``rows``
        padded with dummy micro-batches to the largest count of any rank, and the real count:
        every rank runs as many forwards (each is a collective under FSDP)."""
        ext = list(seqs) + [self._dummy()]
        mbs = self._micro_batches(seqs, np.asarray(rows, dtype=np.int64))
        real = len(mbs)
        mbs += [[len(seqs)]] * (self._max_over_ranks(real) - real)
        return ext, mbs, real

    # -- no-grad passes (log-probs and token signals: the base class's, with the padded plan) ----
    @torch.no_grad()
    def prompt_features(
        self, prompts: Sequence[Sequence[int]], embedding_layer: int | None = None
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        if self.value_head is None and embedding_layer is None:
            return None, None
        n = len(prompts)
        values = np.zeros(n, np.float32) if self.value_head is not None else None
        embs: np.ndarray | None = None
        seqs = [StepSequence(list(p), [], [], i) for i, p in enumerate(prompts)]
        ext, mbs, real = self._scoring_plan(seqs, np.arange(n))
        ext[-1] = StepSequence([self.pad_token_id], [], [], 0)
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
                v = None
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
        if embedding_layer is not None and embs is None:
            # No prompts on this rank: the width is the model's hidden size.
            embs = np.zeros((0, self._hidden_size()), np.float32)
        return values, embs

    def _hidden_size(self) -> int:
        m = self.model.get_base_model() if _is_peft(self.model) else self.model
        return int(m.config.hidden_size)

    # -- the update ----------------------------------------------------------------------------
    # ``Learner.update`` checks the inputs and calls ``_epochs``; here the epochs run over the
    # global rows. This rank's ``seqs`` carry global step rows; ``step_advantages``,
    # ``returns`` and ``old_values`` are indexed by global row.
    def _epochs(self, seqs, adv, returns, old_values, seed) -> dict[str, float]:
        cfg = self.cfg
        n_global = len(adv)
        local_of = np.full(n_global, -1, dtype=np.int64)
        for k, s in enumerate(seqs):
            if not 0 <= s.step_row < n_global:
                raise ValueError(
                    f"sequence {k} has step_row {s.step_row} outside the global batch of {n_global} rows"
                )
            local_of[s.step_row] = k
        # Response lengths of every global row (for the global loss normalisers) and whether a
        # row has any non-zero advantage (only those need a forward when zeros can be skipped).
        lengths = np.zeros(n_global, dtype=np.int64)
        seen = np.zeros(n_global, dtype=np.int64)
        active = adv != 0.0
        tok = self._token_adv
        mine = [
            (s.step_row, len(s.response_ids), bool(np.any(tok[k])) if tok is not None else None)
            for k, s in enumerate(seqs)
        ]
        for part in D.all_gather_objects(mine):
            for row, n, nonzero in part:
                lengths[row] = n
                seen[row] += 1
                if nonzero is not None:
                    active[row] = nonzero
        if (seen != 1).any():
            bad = np.flatnonzero(seen != 1)[:5].tolist()
            raise ValueError(
                f"every global step row must be held by exactly one rank; rows {bad} are not"
            )
        ref = self.logprobs(seqs, reference=True) if cfg.kl_coef > 0 else None
        # the padding micro-batches' dummy sequence (index len(seqs)): its per-token inputs
        if tok is not None:
            self._token_adv = list(tok) + [np.zeros(1, np.float32)]
        if self._loss_masks is not None:
            self._loss_masks = list(self._loss_masks) + [np.zeros(1, bool)]
        if self._value_rows is not None:
            self._value_rows = self._value_rows.with_dummy()
        self._apply_lr_schedule()
        rng = np.random.default_rng(seed)
        self.model.train()
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        for _epoch in range(cfg.epochs):
            perm = rng.permutation(n_global)
            for start in range(0, n_global, cfg.minibatch_size):
                mb = perm[start : start + cfg.minibatch_size]
                stats = self._sharded_minibatch_step(
                    seqs, mb, local_of, lengths, active, adv, ref, returns, old_values
                )
                for k, v in stats.items():
                    sums[k] = sums.get(k, 0.0) + v
                    counts[k] = counts.get(k, 0) + 1
        self.updates += 1
        self._check_parameters()
        sums["lr"], counts["lr"] = self.optimizer.param_groups[0]["lr"], 1
        return {k: v / counts[k] for k, v in sums.items()}

    def _sharded_minibatch_step(
        self, seqs, mb, local_of, lengths, active, adv, ref, returns, old_values
    ) -> dict[str, float]:
        cfg = self.cfg
        denom = self._normaliser([int(lengths[r]) for r in mb])
        value_denom = max(len(mb), 1)
        if self._value_rows is not None:  # HiPER's heads: rows that train each, over all ranks
            value_denom = self._value_rows.row_denominators(mb)
        if self._skips_zero_advantages():  # as Learner._minibatch_step, decided on global rows
            mb = np.asarray([r for r in mb if active[r]], dtype=np.int64)
        processed = len(mb)  # global
        local = [int(local_of[r]) for r in mb if local_of[r] >= 0]
        self.optimizer.zero_grad(set_to_none=True)
        ext, mbs, real = self._scoring_plan(seqs, local)
        ref_ext = None if ref is None else list(ref) + [np.zeros(1, np.float32)]
        acc: dict[str, float] = {}
        bad = ""
        for j, idx in enumerate(mbs):
            loss, terms, st = self._micro_loss(
                ext, idx, adv, ref_ext, returns, old_values, denom, value_denom
            )
            if j >= real:
                loss = loss * 0.0  # a padding micro-batch: collectives only, no gradient
            elif not torch.isfinite(loss):
                bad = bad or f"non-finite loss ({float(loss.detach())})"
            loss.backward()
            if j >= real:
                continue
            w = len(idx) / max(processed, 1)
            for k, val in terms.items():
                acc[k] = acc.get(k, 0.0) + float(val)
            for k, val in st.items():
                acc[k] = acc.get(k, 0.0) + float(val) * w
        parts = D.all_gather_objects((acc, bad))
        problems = [f"rank {r}: {b}" for r, (_, b) in enumerate(parts) if b]
        if problems:
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteError(
                f"{'; '.join(problems)} in update {self.updates}: the update is stopped"
            )
        total: dict[str, float] = {}
        for a, _ in parts:
            for k, v in a.items():
                total[k] = total.get(k, 0.0) + v
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        gnorm = torch.nn.utils.clip_grad_norm_(
            params, cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
        )
        gnorm = float(gnorm.full_tensor() if hasattr(gnorm, "full_tensor") else gnorm)
        if not math.isfinite(gnorm):
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteError(
                f"non-finite gradient norm in update {self.updates}: the update is stopped"
            )
        self.optimizer.step()
        total["grad_norm"] = gnorm
        total["sequences_processed"] = float(processed)
        return total

    # -- weights for the rollout engine --------------------------------------------------------
    @torch.no_grad()
    def sync_to(self, replica: torch.nn.Module, trainable_only: bool = True) -> None:
        """Copy the policy's full weights into ``replica`` (an unsharded copy of the policy,
        same parameter names), on every rank. Only trainable tensors change during training, so
        by default only they are gathered (with LoRA: the adapters alone)."""
        own = dict(replica.named_parameters())
        for name, p in self.model.named_parameters():
            if trainable_only and not p.requires_grad:
                continue
            if name not in own:
                raise KeyError(f"the rollout replica has no parameter {name!r}")
            full = p.full_tensor() if hasattr(p, "full_tensor") else p
            own[name].copy_(full)

    # -- checkpoints -----------------------------------------------------------------------------
    def _check_parameters(self) -> None:
        """Non-finite weights after a step stop the update on every rank (each checks its shards)."""
        local = True
        with torch.no_grad():
            for g in self.optimizer.param_groups:
                for p in g["params"]:
                    t = p.to_local() if hasattr(p, "to_local") else p
                    if t.numel() and not bool(torch.isfinite(t).all()):
                        local = False
                        break
        ok, bad = D.all_ok(local, "non-finite weights")
        if not ok:
            raise NonFiniteError(
                f"{'; '.join(bad)} after update {self.updates} (learning rate {self.cfg.lr}): "
                "training is stopped"
            )

    def state_dict(self):
        raise NotImplementedError(
            "a sharded learner is saved with agentrl.training.sharded_checkpoint.save_learner (DCP)"
        )

    def load_state_dict(self, state) -> None:
        """Load a one-process :meth:`Learner.state_dict` (full tensors, optimiser state by index)
        into the shards: how a run checkpointed by one process resumes under torchrun."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        check_learner_state(state, self.model, self.value_head, self.optimizer)  # exact or refuse
        mods = self.trained_modules()
        names = [n for n, p in mods.named_parameters() if p.requires_grad]
        model_sd = {f"policy.{k}": v for k, v in state["model"].items()}
        if self.value_head is not None and state.get("value_head") is not None:
            model_sd.update({f"value_head.{k}": v for k, v in state["value_head"].items()})
        missing = [k for k in model_sd if k not in names]
        if missing:
            raise KeyError(f"checkpoint has parameters the model lacks: {missing[:5]}")
        osd = state["optimizer"]
        order = [i for g in osd["param_groups"] for i in g["params"]]
        if len(order) != len(names):
            raise ValueError(
                f"the checkpoint's optimiser has {len(order)} parameters, this learner {len(names)}: "
                "was it saved with the same LoRA/value-head settings?"
            )
        fqn = dict(zip(order, names))
        optim_sd = {
            "state": {fqn[i]: v for i, v in osd["state"].items()},
            "param_groups": [
                {**g, "params": [fqn[i] for i in g["params"]]} for g in osd["param_groups"]
            ],
        }
        set_state_dict(
            mods,
            self.optimizer,
            model_state_dict=model_sd,
            optim_state_dict=optim_sd,
            options=StateDictOptions(full_state_dict=True, strict=False),
        )
        self.updates = int(state.get("updates", 0))
