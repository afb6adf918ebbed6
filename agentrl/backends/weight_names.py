"""The learner's weight names as the checkpoint names vLLM loads (the in-process engine's
``reload_weights`` and a fleet server's weight-transfer engine both take checkpoint names)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["checkpoint_items"]


def checkpoint_items(state_dict: Mapping[str, Any]) -> list[tuple[str, torch.Tensor]]:
    """The learner's named tensors under the checkpoint names vLLM loads (peft and DDP/FSDP
    wrappers' prefixes dropped); LoRA tensors are refused: pass merged weights."""
    items: list[tuple[str, torch.Tensor]] = []
    for name, value in state_dict.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"update_weights: {name!r} is a {type(value).__name__}, not a tensor")
        if ".lora_" in name:
            raise ValueError(
                f"update_weights got LoRA adapter tensor {name!r}: pass merged weights, "
                "e.g. agentrl.learner.weights.policy_state_dict(peft_model)"
            )
        if name.startswith("base_model.model."):
            name = name[len("base_model.model.") :]
        if name.startswith("module."):  # DDP / FSDP wrappers
            name = name[len("module.") :]
        items.append((name.replace(".base_layer.", "."), value.detach()))
    if not items:
        raise ValueError("update_weights got an empty state_dict")
    return items
