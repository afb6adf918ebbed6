"""The policy's weights for engines that hold their own copy (vLLM): full weights in plain
Hugging Face names, or, for a LoRA policy, the adapter alone in PEFT's format."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["AdapterWeights", "adapter_weights", "base_state_dict", "policy_state_dict"]


@torch.no_grad()
def policy_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Full weights of the policy as the base architecture names them.

    For a peft (LoRA) model the adapters are merged into a copy of each adapted weight (the
    model itself is left unmerged); for a plain model it is its own ``state_dict``.
    """
    if not hasattr(model, "peft_config"):
        return dict(model.state_dict())
    model.merge_adapter()
    try:
        base = model.get_base_model()
        out = {}
        for k, v in base.state_dict().items():
            if "lora_" in k:
                continue
            out[k.replace(".base_layer.", ".")] = v.detach().clone()
        return out
    finally:
        model.unmerge_adapter()


@torch.no_grad()
def base_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The frozen base weights of a peft (LoRA) model, adapters left out, as the base
    architecture names them (what a fleet server merges the adapter into)."""
    if not hasattr(model, "peft_config"):
        raise ValueError("base_state_dict needs a peft (LoRA) model; use policy_state_dict")
    return {k.replace(".base_layer.", "."): v.detach()
            for k, v in model.get_base_model().state_dict().items() if "lora_" not in k}  # fmt: skip


@dataclass
class AdapterWeights:
    """A LoRA adapter as PEFT saves it: ``tensors`` under PEFT's names
    (``base_model.model.<module>.lora_A.weight``, adapter name removed) and its ``config``
    (a ``peft.LoraConfig``, written as ``adapter_config.json``)."""

    tensors: dict[str, torch.Tensor]
    config: Any

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


@torch.no_grad()
def adapter_weights(model: torch.nn.Module) -> AdapterWeights:
    """The active LoRA adapter of a peft ``model`` (detached copies, on the CPU)."""
    if not hasattr(model, "peft_config"):
        raise ValueError("adapter_weights needs a peft (LoRA) model; use policy_state_dict")
    from peft import get_peft_model_state_dict

    name = getattr(model, "active_adapter", "default")
    state = get_peft_model_state_dict(model, adapter_name=name, save_embedding_layers=False)
    tensors = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in state.items()}
    return AdapterWeights(tensors, model.peft_config[name])
