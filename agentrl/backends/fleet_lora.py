"""LoRA runs on a fleet: the adapter travels, the servers merge it.

A fleet server samples with plain weights (vLLM's CPU LoRA kernels sample several times slower
than merged weights), yet a LoRA run changes only its adapters. So the first sync of a LoRA run
sends the base weights once, with the adapter; the server's ``agentrl_gloo`` engine keeps a
copy of the base weight of every module that a LoRA target shares a vLLM layer with (``q_proj``
is fused with ``k_proj`` and ``v_proj`` into ``qkv_proj``: vLLM reloads a layer whole), and
every later sync sends only the adapter: ``lora_A`` and ``lora_B`` of each target and its scale
``alpha / r``. The server computes ``W = W0 + (B @ A) * scale`` (as peft merges) and loads the
merged tensors through vLLM's layerwise reload, so the bytes on the wire are the adapter's.

This module holds what both ends share: the adapter in checkpoint names
(:func:`wire_adapter`), the merge (:func:`merged_weight`) and the choice of base tensors a
server keeps (:func:`kept_names`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["LORA_A", "LORA_B", "WireAdapter", "is_adapter_name", "kept_names", "merged_state",
           "merged_weight", "wire_adapter"]  # fmt: skip

LORA_A, LORA_B = ".lora_A.weight", ".lora_B.weight"
_PEFT_PREFIX = "base_model.model."


def is_adapter_name(name: str) -> bool:
    return name.endswith(LORA_A) or name.endswith(LORA_B)


@dataclass
class WireAdapter:
    """An adapter as a fleet sync sends it: ``tensors`` under ``<module>.lora_A.weight`` and
    ``<module>.lora_B.weight`` (checkpoint module names), the target ``modules`` and each
    one's ``scales``."""

    tensors: dict[str, torch.Tensor]
    modules: list[str]
    scales: list[float]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


def wire_adapter(tensors: Mapping[str, torch.Tensor], config: Any) -> WireAdapter:
    """PEFT's adapter state (``agentrl.learner.weights.adapter_weights``) in the names a server
    merges by. Plain LoRA on linear layers only: DoRA, per-module rank or alpha patterns,
    transposed (``fan_in_fan_out``) weights and extra trained modules raise ``ValueError``."""
    for key, bad in (("use_dora", True), ("fan_in_fan_out", True)):
        if getattr(config, key, False) == bad:
            raise ValueError(f"a fleet sends plain LoRA adapters only, not {key}=True")
    for key in ("rank_pattern", "alpha_pattern", "modules_to_save"):
        if getattr(config, key, None):
            raise ValueError(f"a fleet sends plain LoRA adapters only: {key} is not supported")
    alpha = float(config.lora_alpha)
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for name, t in tensors.items():
        name = name.removeprefix(_PEFT_PREFIX)
        for end, key in ((LORA_A, "A"), (LORA_B, "B")):
            if name.endswith(end):
                pairs.setdefault(name[: -len(end)], {})[key] = t.detach()
                break
        else:
            raise ValueError(f"adapter tensor {name!r} is not a LoRA lora_A/lora_B weight")
    if not pairs:
        raise ValueError("the adapter has no lora_A/lora_B tensors")
    out: dict[str, torch.Tensor] = {}
    modules, scales = [], []
    for module, ab in pairs.items():
        if set(ab) != {"A", "B"}:
            raise ValueError(f"adapter module {module!r} lacks lora_A or lora_B")
        a, b = ab["A"], ab["B"]
        if a.ndim != 2 or b.ndim != 2 or b.shape[1] != a.shape[0]:
            raise ValueError(f"adapter module {module!r}: shapes {tuple(a.shape)}, "
                             f"{tuple(b.shape)} are not a LoRA pair")  # fmt: skip
        r = a.shape[0]
        modules.append(module)
        scales.append(alpha / (math.sqrt(r) if getattr(config, "use_rslora", False) else r))
        out[module + LORA_A], out[module + LORA_B] = a, b
    return WireAdapter(out, modules, scales)


@torch.no_grad()
def merged_weight(w0: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scale: float) -> torch.Tensor:
    """``W0 + (B @ A) * scale`` in float32 (peft's merge), cast back to ``W0``'s dtype."""
    delta = (b.float() @ a.float()) * scale
    return (w0.float() + delta).to(w0.dtype)


def merged_state(
    base: Iterable[tuple[str, torch.Tensor]], adapter: WireAdapter
) -> dict[str, torch.Tensor]:
    """The full merged weights (for transports that load whole tensors: vLLM's NCCL engine)."""
    scales = dict(zip(adapter.modules, adapter.scales, strict=True))
    out = {}
    for name, w in base:
        module = name.removesuffix(".weight")
        if name.endswith(".weight") and module in scales:
            w = merged_weight(w, adapter.tensors[module + LORA_A],
                              adapter.tensors[module + LORA_B], scales[module])  # fmt: skip
        out[name] = w
    missing = set(scales) - {n.removesuffix(".weight") for n in out}
    if missing:
        raise ValueError(f"LoRA targets without a base weight: {sorted(missing)[:3]}")
    return out


def kept_names(
    names: Iterable[str], modules: Iterable[str], packed: Mapping[str, list[str]]
) -> list[str]:
    """The base tensors a server keeps (in ``names``' order): those of every module that shares
    a vLLM layer with a LoRA target. ``packed`` is the vLLM model's ``packed_modules_mapping``
    (``{"qkv_proj": ["q_proj", "k_proj", "v_proj"], ...}``): a target ``...q_proj`` keeps
    ``...q_proj``, ``...k_proj`` and ``...v_proj`` (weights and biases), since a layer is
    reloaded whole or not at all."""
    groups = [list(g) for g in packed.values()]
    keep: set[str] = set()
    for module in modules:
        parent, _, leaf = module.rpartition(".")
        siblings = next((g for g in groups if leaf in g), [leaf])
        keep.update(f"{parent}.{s}" if parent else s for s in siblings)
    return [n for n in names if n.rpartition(".")[0] in keep]
