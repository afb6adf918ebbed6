"""Weights into a generation engine that holds its own copy of the policy (vLLM): the LoRA
adapter alone or the full (merged) weights, with the sync's seconds and bytes. The synchronous loop
and the asynchronous producer (:mod:`agentrl.training.producer`) both sync through here."""

from __future__ import annotations

from typing import Any

from ..config import TrainConfig
from ..learner.weights import adapter_weights, base_state_dict, policy_state_dict

__all__ = ["adapter_rank", "sync_engine"]


def adapter_rank(cfg: TrainConfig) -> int | None:
    """The LoRA rank the vLLM engine serves adapters of (``rollout.lora_sync=adapter`` with
    ``model.lora.enabled``), or ``None``: the engine then takes full (merged) weights."""
    r, lo = cfg.rollout, cfg.model.lora
    return lo.r if r.backend == "vllm" and lo.enabled and r.lora_sync == "adapter" else None


def sync_engine(cfg: TrainConfig, backend: Any, policy: Any) -> dict[str, float]:
    """Send the policy's weights into an engine that holds its own copy (vLLM): the LoRA adapter
    alone (:func:`adapter_rank`; to a fleet always, its servers merge it) or the full (merged)
    weights. Returns the sync's metrics (its seconds and bytes); the hf engine samples from the
    learner's own model: nothing to send."""
    if cfg.rollout.backend == "hf":
        return {}
    if adapter_rank(cfg) is not None:
        a = adapter_weights(policy)
        backend.update_adapter(a.tensors, a.config)
    elif cfg.rollout.backend == "fleet" and cfg.model.lora.enabled:  # the servers merge it
        a = adapter_weights(policy)
        backend.update_adapter(a.tensors, a.config, base=lambda: base_state_dict(policy))
    else:
        backend.update_weights(policy_state_dict(policy))
    out = {}
    if getattr(backend, "last_sync_seconds", None) is not None:
        out["time/sync_s"] = float(backend.last_sync_seconds)
    if getattr(backend, "last_sync_bytes", None) is not None:
        out["sync/bytes"] = float(backend.last_sync_bytes)
    return out
