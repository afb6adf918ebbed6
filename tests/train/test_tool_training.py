"""Training in the tool-call format, as a user runs it: 2 iterations on Search-v0 and on WebShop
with the embedded model (its tool-aware template, constrained decoding of the admissible calls),
and the config errors of the format (one line, exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.config import ConfigError, load_config
from agentrl.training.preflight import preflight

ROOT = Path(__file__).resolve().parents[2]
TOOL = ["rollout.action_format=tool_call", "rollout.max_new_tokens=64", "trainer=smoke"]


def train(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "agentrl.train", *overrides, f"output_dir={tmp_path}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)


def rows(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    "env, extra",
    [
        ("search", ["rollout.tasks_per_iter=1", "rollout.group_size=2", "env.eval_episodes=2"]),
        (
            "webshop",
            ["rollout.tasks_per_iter=1", "rollout.group_size=2", "env.eval_episodes=2"]
            + ["env.max_steps=3", "env.kwargs.max_steps=3"]
            # its longest admissible call (a search with the task's words) is 77 tiny tokens: the
            # trainer's budget check refuses 64 (constrained decoding could never write it)
            + ["rollout.max_new_tokens=96"],
        ),
    ],
)
def test_two_iterations_in_the_tool_call_format(tmp_path, env, extra):
    pytest.importorskip("torch")
    proc = train(tmp_path, f"env={env}", *TOOL, *extra)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = rows(tmp_path)
    assert [r["phase"] for r in out] == ["eval_initial", "train", "train", "eval_final", "summary"]
    for r in out[1:3]:  # constrained to the admissible calls: every call parses and is accepted
        assert r["train/invalid_action_rate"] == 0.0, r
        assert (
            r["train/response_tokens"] >= 40 * r["train/agent_steps"]
        )  # a call is ~50 tiny tokens


def test_tool_call_config_errors_are_one_line_before_any_work():
    with pytest.raises(ConfigError, match="rollout.action_format: credit module 'hiper' writes"):
        preflight(load_config({"credit": {"name": "hiper"}, **TOOL_CFG}), None)
    with pytest.raises(ConfigError, match="must be one of tag, tool_call, got 'json'"):
        load_config({"rollout": {"action_format": "json"}})
    sokoban = {"env": {"id": "Sokoban-v0"}, "rollout": {"action_format": "tool_call"}}
    with pytest.raises(ConfigError, match=r"the longest, 'up', takes 54 tokens"):
        preflight(load_config(sokoban), None)  # a call is ~54 tiny tokens: 8 cannot write one
    sokoban["rollout"]["max_new_tokens"] = 64
    preflight(load_config(sokoban), None)  # Sokoban has tools, and the calls fit


TOOL_CFG = {"rollout": {"action_format": "tool_call"}}
