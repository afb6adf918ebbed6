"""agent=model: settings resolved from a training run, and the same outcomes as the trainer's
own held-out evaluation of that run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentrl.evaluation.model_agent import ModelAgent, resolve_model_settings
from agentrl.methods.hiper import HINT, HiperFormat
from agentrl.pool import EnvSpec, make_pool
from agentrl.rollout import ActionFormat, chunk_seed, eval_seed


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
    assert (s.credit, s.action_format) == ("gigpo", "default")
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
        ({"path": "tiny", "credit": "nope"}, "unknown credit module 'nope'"),
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


def test_hiper_checkpoint_evaluates_with_the_format_it_trained_with(tmp_path):
    """A ``credit=hiper`` run, evaluated with ``agent=model``: the agent's runner writes and parses
    HiPER's three spans and closes the prompt with HiPER's hint (as the trainer's runner did), and
    every episode record equals the trainer's own final held-out evaluation."""
    run, out = tmp_path / "run", tmp_path / "eval"
    _cli(
        "agentrl.train",
        "trainer=smoke",
        "trainer.iterations=1",
        "trainer.eval_initial=false",
        "credit=hiper",
        "model.max_new_tokens=64",
        "env.eval_episodes=4",
        "env.max_steps=4",
        "rollout.tasks_per_iter=2",
        "rollout.group_size=2",
        "seed=5",
        f"output_dir={run}",
    )
    s = resolve_model_settings({"path": str(run)})
    assert (s.credit, s.action_format, s.max_new_tokens) == ("hiper", "hiper", 64)
    agent, bare = ModelAgent(s, seed=5), ModelAgent(resolve_model_settings({"path": "tiny"}))
    pool = make_pool([EnvSpec("Sokoban-v0", {})] * 2, num_workers=0)
    try:
        runner = agent.runner(pool, 4)
        assert isinstance(runner.fmt, HiperFormat)
        assert runner.builder.cfg.response_hint == HINT
        keep = "<switch>KEEP</switch><subgoal>push</subgoal><action>up</action>"
        assert runner.fmt.parse(keep).action == "up"
        assert runner.fmt.parse("<action>up</action>").action is None  # no switch, no subgoal
        plain = bare.runner(pool, 4)  # a bare model: the configured format and hint
        assert type(plain.fmt) is ActionFormat and plain.builder.cfg.response_hint != HINT
    finally:
        pool.close()
        agent.close()
        bare.close()
    assert resolve_model_settings({"path": "tiny", "credit": "hiper"}).action_format == "hiper"
    _cli(
        "agentrl.evaluate",
        "agent=model",
        f"agent.path={run}",
        "episodes=4",
        "num_envs=4",
        "max_steps=4",
        "seed=5",
        "progress=false",
        f"output_dir={out}",
    )
    trained = json.loads((run / "summary.json").read_text())["final_eval"]["episodes"]
    evaluated = json.loads((out / "results.json").read_text())
    assert evaluated["meta"]["agent_config"]["resolved"]["action_format"] == "hiper"
    assert evaluated["episodes"] == trained
