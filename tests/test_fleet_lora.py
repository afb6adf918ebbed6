"""The pieces of a fleet's LoRA sync and chunking that run without a server: PEFT's adapter in
the names a server merges by, the merge against peft's own, the base tensors a server keeps (a
fused layer whole), the chunk layout (whole decoder layers) and the buffer pool's reuse rule.
The servers themselves are exercised in tests/test_fleet.py."""

from __future__ import annotations

import copy

import pytest
import torch
from vllm_tiny import build_tiny_model

from agentrl.backends.fleet_lora import kept_names, merged_state, wire_adapter
from agentrl.backends.fleet_transfer import BufferPool, _layout
from agentrl.backends.weight_names import checkpoint_items
from agentrl.learner.weights import adapter_weights, base_state_dict
from agentrl.models import apply_lora

QWEN2_PACKED = {
    "qkv_proj": ["q_proj", "k_proj", "v_proj"],
    "gate_up_proj": ["gate_proj", "up_proj"],
}


@pytest.fixture(scope="module")
def policy():
    model = apply_lora(build_tiny_model(None, seed=4).model, r=4, alpha=6.0,
                       target_modules=["q_proj", "v_proj", "down_proj"])  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    return model


def test_the_adapter_in_checkpoint_names_with_its_scale(policy):
    a = adapter_weights(policy)
    wire = wire_adapter(a.tensors, a.config)
    assert "model.layers.0.self_attn.q_proj" in wire.modules
    assert "model.layers.1.mlp.down_proj.lora_B.weight" in wire.tensors
    assert len(wire.modules) == 6 and set(wire.scales) == {6.0 / 4}
    assert wire.nbytes == a.nbytes


def test_the_merge_is_peft_merge(policy):
    a = adapter_weights(policy)
    mine = merged_state(
        checkpoint_items(base_state_dict(policy)), wire_adapter(a.tensors, a.config)
    )
    peft = copy.deepcopy(policy).merge_and_unload().state_dict()
    assert mine.keys() == peft.keys()
    assert max((mine[k] - peft[k]).abs().max().item() for k in peft) < 1e-6
    base = base_state_dict(policy)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert (mine[q] - base[q]).abs().max() > 1e-2  # the adapter moved it


@pytest.mark.parametrize(
    ("config", "why"),
    [({"use_dora": True}, "use_dora"), ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
     ({"rank_pattern": {"q_proj": 8}}, "rank_pattern")],
)  # fmt: skip
def test_other_adapters_are_refused_in_one_line(policy, config, why):
    a = adapter_weights(policy)
    cfg = copy.copy(a.config)
    for k, v in config.items():
        setattr(cfg, k, v)
    with pytest.raises(ValueError, match=why):
        wire_adapter(a.tensors, cfg)
    with pytest.raises(ValueError, match="not a LoRA"):
        wire_adapter({"base_model.model.lm_head.weight": torch.zeros(2, 2)}, a.config)


def test_a_server_keeps_the_fused_layer_whole(policy):
    names = list(base_state_dict(policy))
    kept = kept_names(names, ["model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj"],
                      QWEN2_PACKED)  # fmt: skip
    assert kept == [
        "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.bias",
        "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.k_proj.bias",
        "model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.v_proj.bias",
        "model.layers.1.mlp.down_proj.weight",
    ]  # fmt: skip


def test_chunks_hold_whole_layers():
    names = ["embed.weight"] + [f"model.layers.{i}.w{j}" for i in range(4) for j in range(3)]
    names += ["model.norm.weight"]
    shapes = [[10]] + [[4]] * 12 + [[2]]  # float32: 40 bytes, 16 bytes per layer tensor
    chunks = _layout(names, ["float32"] * len(names), shapes, 100)
    layers = [{names[i].split(".")[2] for i, _, _ in c if "layers" in names[i]} for c in chunks]
    assert layers == [{"0"}, {"1", "2"}, {"3"}]  # 48-byte layers, never cut (fill: 88, 96, 56)
    assert [i for c in chunks for i, _, _ in c] == list(range(len(names)))
    big = _layout(names, ["float32"] * len(names), shapes, 20)  # a layer bigger than a chunk
    assert max(sum(n for _, _, n in c) for c in big) <= 40  # the embedding travels alone


def test_a_buffer_comes_back_only_when_no_view_holds_it():
    pool = BufferPool()
    buf = pool.take(64)
    view = buf[:8]
    pool.give(buf)
    assert pool.take(64) is not buf  # a view was alive: a fresh one
    del view
    pool.give(buf)
    assert pool.take(64) is buf
