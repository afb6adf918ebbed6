"""env.backend=ray end to end: a 2-iteration training run on generated WebShop with Ray actors."""

from __future__ import annotations

import json

import pytest

from agentrl.config import load_config
from agentrl.recipe import train

from .helpers import SMOKE, make_cfg


def test_two_iterations_with_env_actors_on_ray(tmp_path):
    ray = pytest.importorskip("ray")
    if ray.is_initialized():  # another module's Ray would be reused; this run starts its own
        ray.shutdown()
    cfg = make_cfg(
        *SMOKE,
        "env=webshop",
        "env.max_steps=4",
        "env.backend=ray",  # env.ray.address null and no RAY_ADDRESS: the pool starts a local Ray
        "env.ray.envs_per_actor=4",
        "env.ray.num_cpus=0.5",
    )
    summary = train(load_config(cfg), tmp_path)
    assert summary.iterations == 2 and summary.eval_episodes == 4
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["phase"] for r in rows] == ["eval_initial", "train", "train", "eval_final", "summary"]
    assert not ray.is_initialized()  # closing the pool stopped the Ray it started
