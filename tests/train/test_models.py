"""The locally built tiny model: reloadable, identical token ids, a chat template, no downloads."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer
from transformers import AutoTokenizer

from agentrl.models.tiny import SPECIAL_TOKENS, TAG_TOKENS, TinyModelConfig, build_tiny

TEXTS = [
    "#####\n#OP_#\n#X__#\n#___#\n#####",
    "You are the player P in a Sokoban room. √ S",
    "<action>up</action>",
    "go to cabinet 1 ünïcödé 漢字 \t tabs",
]


def test_tiny_folder_is_a_standard_hf_model(tiny_path):
    files = {p.name for p in Path(tiny_path).iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= files
    cfg = json.loads((Path(tiny_path) / "config.json").read_text())
    assert cfg["model_type"] == "qwen2"
    assert (
        cfg["hidden_size"] // cfg["num_attention_heads"] == 32
    )  # a head size vLLM's CPU attention supports


def test_reloads_give_identical_token_ids(tiny_path):
    raw = Tokenizer.from_file(str(Path(tiny_path) / "tokenizer.json"))
    hf = AutoTokenizer.from_pretrained(tiny_path)
    for text in TEXTS:
        ids = hf(text, add_special_tokens=False)["input_ids"]
        assert ids == raw.encode(text, add_special_tokens=False).ids
        assert hf.decode(ids) == text  # byte-level: lossless on any text


def test_grid_cells_and_tags_are_single_tokens(tiny_path):
    tok = AutoTokenizer.from_pretrained(tiny_path)
    assert len(tok("#OP_X√S\n", add_special_tokens=False)["input_ids"]) == 8
    for tag in TAG_TOKENS + ["up", "down", "left", "right"]:
        assert len(tok(tag, add_special_tokens=False)["input_ids"]) == 1, tag


def test_chat_template_and_special_tokens(tiny_path):
    tok = AutoTokenizer.from_pretrained(tiny_path)
    text = tok.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert text == "<|system|>S<|end|><|user|>U<|end|><|assistant|>"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids)[0] == "<|system|>"
    assert tok.eos_token == "<|end|>" and tok.pad_token == "<|endoftext|>"
    assert all(t in tok.get_vocab() for t in SPECIAL_TOKENS)


def test_build_is_cached_and_deterministic(tmp_path):
    spec = TinyModelConfig(
        vocab_size=320,
        hidden_size=64,
        num_heads=2,
        num_kv_heads=2,
        intermediate_size=64,
        num_layers=1,
    )
    a = build_tiny(spec, root=tmp_path)
    mtime = (a / "model.safetensors").stat().st_mtime
    assert build_tiny(spec, root=tmp_path) == a
    assert (a / "model.safetensors").stat().st_mtime == mtime  # not rebuilt
    b = build_tiny(spec, root=tmp_path / "other")
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()


def test_the_config_is_the_tiny_models_spec_and_its_cache_key_is_pinned():
    """``model.tiny`` (TinyModelConfig) is what build_tiny builds from; the default spec's cache
    folder name is pinned, so an edit that would silently orphan every cached tiny model (and
    rebuild it under a new name) fails here: bump RECIPE_VERSION on purpose instead."""
    from dataclasses import asdict

    from agentrl.config import load_config
    from agentrl.models.tiny import _recipe_hash, tiny_corpus

    assert TinyModelConfig is type(load_config({}).model.tiny)
    assert _recipe_hash(TinyModelConfig(), tiny_corpus()) == "98e19ad6cbe0b9af"
    assert list(asdict(TinyModelConfig())) == [
        "vocab_size",
        "hidden_size",
        "num_layers",
        "num_heads",
        "num_kv_heads",
        "intermediate_size",
        "max_position_embeddings",
        "seed",
    ]
