"""The PPO learner sharded with FSDP2 (``torch.distributed.fsdp.fully_shard``) across ranks.

:class:`FSDPLearner` is :class:`~agentrl.learner.Learner` with its modules sharded: each
decoder layer and the root of the policy (and of the frozen reference and the value head when
used) are ``fully_shard`` units over all ranks; parameters, gradients and AdamW states are
DTensors holding ``1/world`` of each tensor. The epochs, the loss, the optimiser step and the
parameter check are the learner's own; this class overrides only the hooks where sharding
differs (:meth:`_prepare_modules`, :meth:`_scoring_plan`, :meth:`_row_layout`, :meth:`_gather`,
:meth:`autocast`). What changes is where the rows are:

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
import warnings
from collections.abc import Sequence

import numpy as np
import torch

from agentrl import distributed as D

from .learner import Learner, LearnerConfig
from .scoring import is_peft
from .sequences import StepSequence
from .state_check import check_learner_state
from .update import RowLayout, UpdateInputs

__all__ = ["FSDPLearner", "decoder_layers", "shard_model"]


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks of a HF causal LM (peft-wrapped or not): the FSDP units.

    Found by the classes the model lists in ``_no_split_modules`` (e.g. ``Qwen2DecoderLayer``),
    the same blocks HF's own device placement never splits.
    """
    base = model.get_base_model() if is_peft(model) else model
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
        cfg, pad_token_id, value_head, temperature, value_outputs, keep_reference, lr_schedule,
        entropy_schedule: as :class:`Learner`.
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
        entropy_schedule=None,
        mixed_precision: bool | None = None,
    ):
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "FSDPLearner needs a process group (launch with torchrun, or "
                "agentrl.distributed.init_single_rank() for a world of one); "
                "use Learner in a plain process"
            )
        self.mixed_precision = mixed_precision  # resolved by _prepare_modules
        super().__init__(
            model,
            cfg,
            pad_token_id,
            value_head=value_head,
            temperature=temperature,
            value_outputs=value_outputs,
            keep_reference=keep_reference,
            lr_schedule=lr_schedule,
            entropy_schedule=entropy_schedule,
        )

    # -- the hooks -----------------------------------------------------------------------------
    def _prepare_modules(self) -> None:
        """Shard the policy, the reference and the value head (rank 0's weights first); the
        learner then builds the optimiser over the sharded (DTensor) parameters."""
        from torch.distributed.fsdp import MixedPrecisionPolicy

        if self.mixed_precision is None:
            self.mixed_precision = (
                self.cfg.dtype in ("auto", "bfloat16")
                and self.device.type == "cuda"
                and torch.cuda.is_bf16_supported()
            )
        self.mixed_precision = bool(self.mixed_precision)
        mp = (
            MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            if self.mixed_precision
            else MixedPrecisionPolicy()
        )
        _broadcast_from_rank0(self.model)
        shard_model(self.model, mp_policy=mp)
        if self.reference is not None:
            _broadcast_from_rank0(self.reference)
            shard_model(self.reference, mp_policy=mp)
        if self.value_head is not None:
            _broadcast_from_rank0(self.value_head)
            shard_model(self.value_head, mp_policy=MixedPrecisionPolicy(), layers=())

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

    def _row_layout(self, seqs: Sequence[StepSequence], inp: UpdateInputs) -> RowLayout:
        """The global step rows (``len(step_advantages)`` of them): which sequence of this rank
        holds each, and every row's count of tokens in the loss and non-zero-advantage flag,
        gathered."""
        n_global = len(inp.adv)
        local_of = np.full(n_global, -1, dtype=np.int64)
        for k, s in enumerate(seqs):
            if not 0 <= s.step_row < n_global:
                raise ValueError(
                    f"sequence {k} has step_row {s.step_row} outside the global batch of {n_global} rows"
                )
            local_of[s.step_row] = k
        lengths = np.zeros(n_global, dtype=np.int64)
        seen = np.zeros(n_global, dtype=np.int64)
        active = inp.adv != 0.0
        tok = inp.token_adv
        mine = [
            (s.step_row, int(np.sum(keep)), bool(np.any(tok[k])) if tok is not None else None)
            for k, (s, keep) in enumerate(zip(seqs, inp.keep))
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
        return RowLayout(local_of, np.arange(n_global, dtype=np.int64), lengths, active)

    def _gather(self, stats: dict[str, float], problem: str) -> tuple[dict[str, float], list[str]]:
        """Every rank's ``stats`` summed, and the problems of the ranks that had one (named)."""
        parts = D.all_gather_objects((stats, problem))
        total: dict[str, float] = {}
        for a, _ in parts:
            for k, v in a.items():
                total[k] = total.get(k, 0.0) + v
        return total, [f"rank {r}: {b}" for r, (_, b) in enumerate(parts) if b]

    def _gather_tokens(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every rank's per-token arrays, concatenated in rank order."""
        parts = D.all_gather_objects(arrays)
        return {k: np.concatenate([p[k] for p in parts]) for k in arrays}

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
