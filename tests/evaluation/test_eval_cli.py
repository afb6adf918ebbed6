"""python -m agentrl.evaluate end to end: outputs, reproducibility, config errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from agentrl.evaluate import evaluate
from agentrl.evaluation import Report

ROOT = Path(__file__).resolve().parents[2]


def cfg_with(tmp_path, *overrides):
    with initialize_config_module("agentrl.configs", version_base=None):
        return compose("evaluate", [f"output_dir={tmp_path}", "progress=false", *overrides])


def test_expert_scores_100_and_outputs_agree(tmp_path):
    report = evaluate(cfg_with(tmp_path, "agent=expert", "episodes=40"))
    assert report.overall.success_rate == 1.0 and report.overall.episodes == 40
    data = json.loads((tmp_path / "results.json").read_text())
    assert Report.from_dict(data) == report
    assert data["meta"]["agent"] == "expert" and data["meta"]["split"] == "test"
    assert [t["task_id"] for t in data["meta"]["tasks"]] == [
        str(1_000_000_000 + i) for i in range(40)
    ]
    assert [e["task_id"] for e in data["episodes"]] == [t["task_id"] for t in data["meta"]["tasks"]]
    assert (tmp_path / "table.md").read_text() == report.table("markdown")
    assert (tmp_path / "success.png").read_bytes()[:4] == b"\x89PNG"


def test_the_first_tasks_are_traced_step_by_step(tmp_path):
    from agentrl.evaluation.traces import read_trace

    report = evaluate(cfg_with(tmp_path, "agent=expert", "episodes=6", "traces=4"))
    meta, episodes = read_trace(tmp_path / "traces" / "eval_expert.jsonl")
    assert meta["kind"] == "eval" and meta["agent"] == "expert"
    assert [e["task_id"] for e in episodes] == [str(1_000_000_000 + i) for i in range(4)]
    for e, rec in zip(episodes, report.records):
        assert e["won"] == rec.won and e["outcome"] == "won"
        assert len(e["steps"]) == rec.steps and all(s["valid"] for s in e["steps"])
        assert e["steps"][0]["observation"] and e["steps"][0]["action"]
    evaluate(cfg_with(tmp_path / "off", "agent=random", "episodes=2", "traces=0"))
    assert not (tmp_path / "off" / "traces").exists()


def test_env_config_defaults_and_overrides(tmp_path):
    report = evaluate(cfg_with(tmp_path, "agent=random", "episodes=10", "max_steps=3", "seed=7"))
    meta = report.meta
    assert (meta["max_steps"], meta["seed"], meta["episodes"]) == (3, 7, 10)
    assert all(r.steps <= 3 for r in report.records)
    ids = evaluate(cfg_with(tmp_path, "agent=random", "task_ids=[5,6,7]", "repeats=2")).records
    assert [r.task_id for r in ids] == ["5", "5", "6", "6", "7", "7"]


def test_frozenlake_is_evaluated_by_seed(tmp_path):
    report = evaluate(cfg_with(tmp_path, "env=frozenlake", "agent=expert", "episodes=5"))
    assert report.overall.success_rate == 1.0
    assert [r.seed for r in report.records] == [1_000_000_000 + i for i in range(5)]


def test_unknown_agent(tmp_path):
    cfg = cfg_with(tmp_path, "agent=random", "agent.name=oracle", "episodes=2")
    with pytest.raises(ValueError, match="unknown agent 'oracle'"):
        evaluate(cfg)


def run_cli(out, *overrides):
    cmd = [
        sys.executable,
        "-m",
        "agentrl.evaluate",
        f"output_dir={out}",
        f"hydra.run.dir={out}/hydra",
        "progress=false",
        *overrides,
    ]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_cli_twice_gives_identical_results(tmp_path):
    args = ("agent=random", "episodes=60", "num_workers=2", "num_envs=8")
    a, b = run_cli(tmp_path / "a", *args), run_cli(tmp_path / "b", *args)
    assert a.returncode == 0, a.stderr
    assert b.returncode == 0, b.stderr
    for name in ("results.json", "table.md", "success.png"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert "success %" in a.stdout and "results:" in a.stdout


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("agent=random", "split=valid"), "Sokoban has splits 'train' and 'test'"),
        (("agent=random", "env.id=Nope-v0"), "unknown environment 'Nope-v0'"),
    ],
)
def test_cli_reports_bad_config(tmp_path, overrides, message):
    """A config problem is one line and exit 2, as in agentrl.train."""
    res = run_cli(tmp_path, *overrides)
    assert res.returncode == 2
    assert "invalid config" in res.stderr and message in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("num_envs=0", "num_envs"),
        ("num_envs=abc", "num_envs"),
        ("repeats=0", "repeats"),
        ("episodes=0", "episodes"),
        (f"episodes={10**23}", "episodes"),
        ("max_steps=0", "max_steps"),
        ("num_workers=-1", "num_workers"),
        ("seed=-1", "seed"),
        ("confidence=1.5", "confidence"),
        ("step_timeout=0", "step_timeout"),
    ],
)
def test_bad_sizes_are_config_problems_naming_the_key(tmp_path, override, key):
    """Counts and limits are checked before any env or model is built."""
    from agentrl.evaluate import ConfigProblem

    with pytest.raises(ConfigProblem, match=rf"^{key} must be"):
        evaluate(cfg_with(tmp_path, "agent=random", override))
    assert not (tmp_path / "results.json").exists()


def test_model_agent_actions_longer_than_its_budget_are_refused(tmp_path):
    """agent=model with constrained decoding: the budget rule of agentrl.train, before any
    episode (Sokoban's directions are 4 tiny-model tokens with the stop token)."""
    from agentrl.evaluate import ConfigProblem

    cfg = cfg_with(tmp_path, "agent=model", "agent.path=tiny", "agent.max_new_tokens=3",
                   "agent.constrained=true", "episodes=2")  # fmt: skip
    with pytest.raises(ConfigProblem) as info:
        evaluate(cfg)
    msg = str(info.value)
    assert "agent.max_new_tokens=3" in msg and "agent.max_new_tokens >= 4" in msg, msg
    assert not (tmp_path / "results.json").exists()
