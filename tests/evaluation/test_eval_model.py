"""agent=model: settings resolved from a training run, and the same outcomes as the trainer's
own held-out evaluation of that run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentrl.evaluation.model_agent import resolve_model_settings
from agentrl.rollout import chunk_seed, eval_seed


def test_builtin_model_settings_come_from_its_preset():
    s = resolve_model_settings({"path": "tiny"})
    assert s.model == "tiny" and s.backend == "hf" and s.source == "model/tiny.yaml"
    assert (s.prompt["instruction"], s.prompt["history"], s.prompt["admissible_actions"]) == (
        False,
        0,
        False,
    )
    assert s.prompt["max_prompt_tokens"] == 512 and s.max_new_tokens == 8 and s.constrained is True
    assert s.action["pattern"] == "<action>(.*?)</action>"
    o = resolve_model_settings(
        {"path": "tiny", "prompt": {"history": 3}, "temperature": 0.5, "constrained": False}
    )
    assert (o.prompt["history"], o.temperature, o.constrained) == (3, 0.5, False)


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        ({"path": None}, "needs agent.path"),
        ({"path": "/no/such/model"}, "no such folder"),
        ({"path": "tiny", "backend": "tgi"}, "hf or vllm"),
    ],
)
def test_bad_model_settings(cfg, match):
    with pytest.raises(ValueError, match=match):
        resolve_model_settings(cfg)


def _cli(module: str, *overrides: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", module, *overrides], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


def test_checkpoint_evaluates_as_the_trainer_evaluated_it(tmp_path):
    """``python -m agentrl.train`` then ``python -m agentrl.evaluate agent=model`` on its run, with
    the run's seed and pool size: every episode record (task, reset seed, sampling seed, outcome,
    steps, return) equals the trainer's own final held-out evaluation. Sampled at temperature 1,
    so the two paths must also agree on chunking and on the evaluation seed rule."""
    run, out = tmp_path / "run", tmp_path / "eval"
    _cli(
        "agentrl.train",
        "trainer=smoke",
        "trainer.eval_initial=false",
        "env.eval_episodes=6",
        "rollout.tasks_per_iter=2",
        "rollout.group_size=2",
        "rollout.eval_temperature=1.0",
        "model.prompt.history=1",
        "seed=3",
        f"output_dir={run}",
    )
    _cli(
        "agentrl.evaluate",
        "agent=model",
        f"agent.path={run}",
        "agent.temperature=1.0",
        "episodes=6",
        "num_envs=4",
        "seed=3",
        "progress=false",
        f"output_dir={out}",
    )
    trained = json.loads((run / "summary.json").read_text())["final_eval"]["episodes"]
    evaluated = json.loads((out / "results.json").read_text())
    resolved = evaluated["meta"]["agent_config"]["resolved"]
    assert resolved["source"] == str(run) and resolved["model"] == str(
        run / "checkpoints" / "final"
    )
    assert (resolved["prompt"]["history"], resolved["constrained"], resolved["max_new_tokens"]) == (
        1,
        True,
        8,
    )
    # chunks of 4 tasks, each sampled with the trainer's held-out seed rule
    seeds = [chunk_seed(eval_seed(3), 0)] * 4 + [chunk_seed(eval_seed(3), 4)] * 2
    assert [e["agent_seed"] for e in evaluated["episodes"]] == seeds
    assert [e["seed"] for e in evaluated["episodes"]] == [
        t["seed"] for t in evaluated["meta"]["tasks"]
    ]
    assert evaluated["episodes"] == trained
