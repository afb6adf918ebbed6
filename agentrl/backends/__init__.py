"""Generation backends: one interface (:class:`Backend`), Hugging Face and vLLM engines.

``make_backend(cfg, model, tokenizer, model_path=..., seed=...)`` builds the engine named by
``cfg.backend`` (the ``rollout`` config group):

- ``hf``: :class:`agentrl.backends.hf.HFBackend`, sharing the learner's module (no weight copy);
- ``vllm``: ``agentrl.backends.vllm_engine.VLLMBackend.from_config(cfg, model_path=...,
  tokenizer=..., seed=..., lora_rank=...)``, imported only when selected (vLLM is an optional
  install); ``lora_rank`` makes it serve the base model plus a LoRA adapter.
"""

from __future__ import annotations

from typing import Any

from .base import Backend, Generation, SamplingParams
from .hf import HFBackend

__all__ = ["Backend", "Generation", "SamplingParams", "make_backend"]

BACKENDS = ("hf", "vllm", "fleet")


def make_backend(
    cfg: Any,
    model: Any,
    tokenizer: Any,
    *,
    model_path: str | None = None,
    seed: int = 0,
    lora_rank: int | None = None,
) -> Backend:
    """The generation backend selected by ``cfg.backend`` (``lora_rank``: vllm only, serve the
    base model plus a LoRA adapter of that rank, synced with ``update_adapter``)."""
    name = cfg.get("backend", "hf") if hasattr(cfg, "get") else getattr(cfg, "backend", "hf")
    if name == "hf":
        tokens = cfg.get("max_batch_tokens", None)
        return HFBackend(
            model,
            pad_token_id=tokenizer.pad_token_id,
            max_batch_size=int(cfg.get("max_batch_size", 256)),
            seed=seed,
            max_batch_tokens=None if tokens is None else int(tokens),
        )
    if name == "vllm":
        try:
            from .vllm_engine import VLLMBackend
        except ImportError as exc:
            raise ImportError(f"rollout.backend=vllm needs vLLM installed ({exc})") from exc
        return VLLMBackend.from_config(
            cfg, model_path=model_path, tokenizer=tokenizer, seed=seed, lora_rank=lora_rank
        )
    if name == "fleet":
        if lora_rank is not None:
            raise ValueError(
                "rollout=fleet sends full (merged) weights: set rollout.lora_sync=merged"
            )
        from .fleet import FleetBackend

        return FleetBackend.from_config(cfg, model_path=model_path, model=model)
    raise ValueError(f"rollout.backend must be one of {', '.join(BACKENDS)}, got {name!r}")
