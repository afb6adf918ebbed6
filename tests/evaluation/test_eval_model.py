"""agent=model: settings resolved from a training run, and the same outcomes as the trainer's
own held-out evaluation of that run."""

from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_module

from agentrl.evaluate import evaluate
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


def test_checkpoint_evaluates_as_the_trainer_evaluated_it(tmp_path):
    from agentrl.config import load_config
    from agentrl.recipe import train

    run = tmp_path / "run"
    with initialize_config_module("agentrl.configs", version_base=None):
        tcfg = compose(
            "train",
            [
                "trainer=smoke",
                "env.eval_episodes=8",
                "rollout.tasks_per_iter=2",
                "rollout.group_size=2",
                "model.prompt.history=1",
                f"output_dir={run}",
            ],
        )
        ecfg = compose(
            "evaluate",
            [
                "agent=model",
                f"agent.path={run / 'checkpoints' / 'final'}",
                "episodes=8",
                "num_envs=4",
                "progress=false",
                f"output_dir={tmp_path / 'eval'}",
            ],
        )
    train(load_config(tcfg), run)
    report = evaluate(ecfg)
    resolved = report.meta["agent_config"]["resolved"]
    assert resolved["source"] == str(run) and resolved["model"] == str(
        run / "checkpoints" / "final"
    )
    assert (
        resolved["prompt"]["history"] == 1
        and resolved["constrained"] is True
        and resolved["max_new_tokens"] == 8
    )
    trained = json.loads((run / "summary.json").read_text())["final_eval"]["episodes"]

    def key(e):
        return (
            e["task_id"],
            e["category"],
            e["won"],
            e["steps"],
            e["invalid_actions"],
            e["score"],
            e["truncated"],
        )

    assert [key(e) for e in trained] == [key(r.to_dict()) for r in report.records]
    # every chunk of num_envs tasks samples with the trainer's held-out seed rule
    assert [r.agent_seed for r in report.records] == [chunk_seed(eval_seed(0), 0)] * 4 + [
        chunk_seed(eval_seed(0), 4)
    ] * 4
    assert [r.total_reward for r in report.records] == pytest.approx(
        [e["total_reward"] for e in trained]
    )
