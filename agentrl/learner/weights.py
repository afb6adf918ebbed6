"""The policy's weights in plain Hugging Face names, for engines that hold their own copy (vLLM)."""

from __future__ import annotations

import torch

__all__ = ["policy_state_dict"]


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
