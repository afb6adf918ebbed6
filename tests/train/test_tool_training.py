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


def test_the_tool_call_format_runs_on_the_default_env_and_model_with_nothing_else(tmp_path):
    """``rollout.action_format=tool_call`` alone (the sizes below keep it short and leave the
    budget alone): the format brings the response budget a call needs, and says so."""
    pytest.importorskip("torch")
    small = ["trainer=smoke", "trainer.iterations=1", "trainer.eval_initial=false"]
    small += ["rollout.tasks_per_iter=1", "rollout.group_size=2", "env.eval_episodes=1"]
    proc = train(tmp_path, "rollout.action_format=tool_call", *small)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "rollout.max_new_tokens=58: the tool_call action format writes up to 50 tokens more" in (
        proc.stdout
    )
    cfg = (tmp_path / "config.yaml").read_text()
    assert "max_new_tokens: 58" in cfg  # what the run used, for a resume or an evaluation
    assert [r["phase"] for r in rows(tmp_path)] == ["train", "eval_final", "summary"]


def test_a_budget_set_by_hand_is_kept_and_checked():
    from agentrl.train import prepare
    from tests.train.helpers import make_cfg

    cfg = prepare(make_cfg("credit=hiper"), None)
    assert cfg.rollout.max_new_tokens == 42  # the preset's 8 + the 34 HiPER's tags add
    assert (
        prepare(make_cfg("credit=hiper", "rollout.max_new_tokens=50"), None).rollout.max_new_tokens
        == 50
    )
    with pytest.raises(
        ConfigError, match=r"'up', takes 38 tokens .*set rollout.max_new_tokens >= 38"
    ):
        prepare(make_cfg("credit=hiper", "rollout.max_new_tokens=16"), None)
    assert prepare(make_cfg(), None).rollout.max_new_tokens == 8  # the tag format: the preset's


def test_a_template_without_tools_is_refused_in_one_line_before_the_model_loads():
    """SmolLM2-135M-Instruct's chat template ignores tools=...: the model would never see them.
    The command a user tried (it ended in a traceback after the model loaded): one line now
    (``python -m agentrl.train`` prints it and exits 2)."""
    pytest.importorskip("gguf")
    from agentrl.train import prepare
    from tests.train.helpers import make_cfg

    command = [
        "model=smollm2-135m",
        "rollout=vllm",
        "env=search",
        "rollout.action_format=tool_call",
    ]
    with pytest.raises(ConfigError) as err:
        prepare(make_cfg(*command), None)
    assert str(err.value) == (
        "invalid config: rollout.action_format=tool_call: the chat template of model "
        "smollm2-135m renders no tools (apply_chat_template ignores tools=...), so the model "
        "would never see the env's tools; use a model whose template renders them (model=tiny, "
        "Qwen2.5, Qwen3, Llama 3.1) or rollout.action_format=tag"
    )


def test_a_template_whose_call_syntax_cannot_be_told_asks_for_it(tmp_path):
    import shutil
    from dataclasses import asdict

    from agentrl.config import TinyModelConfig
    from agentrl.models import resolve_model_path

    folder = tmp_path / "model"
    shutil.copytree(resolve_model_path("tiny", asdict(TinyModelConfig())), folder)
    conf = json.loads((folder / "tokenizer_config.json").read_text())
    conf["chat_template"] = (
        "{% if tools %}Tools: {{ tools | tojson }}\n{% endif %}"
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    )
    (folder / "tokenizer_config.json").write_text(json.dumps(conf))
    for extra in folder.glob("chat_template.j*"):
        extra.unlink()
    base = {"model": {"name": str(folder), "tiny": None}, "rollout": {"action_format": "tool_call"}}
    with pytest.raises(ConfigError, match="rollout.tool_syntax=auto: the chat template of model"):
        preflight(load_config(base), None)
    base["rollout"] |= {"tool_syntax": "hermes", "max_new_tokens": 96}
    preflight(load_config(base), None)  # named: it renders the tools, the syntax is given


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
