"""End to end: smoke runs per env and per credit module, config checks, outputs, resume."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from agentrl import credit
from agentrl.config import load_config
from agentrl.recipe import TrainingStopped, train
from agentrl.train import prepare

from .helpers import SMOKE, make_cfg, options

#: What an env needs beyond them (OpenSpiel's tic-tac-toe moves, "x(0,0)", take 9 tiny tokens).
ENV_OVERRIDES = {"tictactoe": ["model.max_new_tokens=10"]}


def _run(tmp_path, *overrides):
    return train(load_config(make_cfg(*SMOKE, *overrides)), tmp_path)


def _rows(path):
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


def test_every_credit_module_has_a_config():
    assert set(credit.available()) <= set(options("credit"))
    script = Path(__file__).resolve().parents[2] / "scripts" / "gen_credit_configs.py"
    proc = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_required_env_configs_exist():
    assert {"sokoban", "frozenlake", "webshop", "alfworld"} <= set(options("env"))


@pytest.mark.parametrize("env", options("env"))
def test_smoke_per_env(tmp_path, env):
    summary = _run(tmp_path, f"env={env}", "env.max_steps=4", *ENV_OVERRIDES.get(env, []))
    assert summary.iterations == 2 and summary.eval_episodes == 4
    rows = _rows(tmp_path)
    assert [r["phase"] for r in rows] == ["eval_initial", "train", "train", "eval_final", "summary"]
    train = rows[1]
    for key in (
        "time/rollout_s",
        "time/credit_s",
        "time/update_s",
        "train/success_rate",
        "loss/grad_norm",
    ):
        assert key in train


@pytest.mark.parametrize("name", sorted(credit.available()))
def test_smoke_per_credit_module(tmp_path, name, monkeypatch):
    # 4 tasks: with seed 0 both iterations hold groups with differing returns (2 tasks: none).
    # Nothing else: a module's own action format brings the response budget it needs (HiPER's
    # three spans take 38 tiny tokens; the model preset's budget is 8), as python -m
    # agentrl.train credit=<name> gives it (agentrl.train.prepare: the checks, the budget)
    raw = make_cfg(*SMOKE, f"credit={name}", "trainer.eval_initial=false", "env.eval_episodes=2",
                   "rollout.tasks_per_iter=4")  # fmt: skip
    cfg = prepare(raw, str(tmp_path))
    # Spy on the module through the registry (every caller of credit.compute goes through it).
    seen, lookup = [], credit.registry.get

    @functools.wraps(lookup(name))  # keeps the module's signature (its options)
    def spy(batch, **opts):
        result = lookup(name)(batch, **opts)
        seen.append((batch, np.asarray(result.advantages)))
        return result

    monkeypatch.setattr(credit.registry, "get", lambda m: spy if m == name else lookup(m))
    summary = train(cfg, tmp_path)
    assert summary.credit == name
    rows = [r for r in _rows(tmp_path) if r["phase"] == "train"]
    assert len(rows) == 2 and all(torch.isfinite(torch.tensor(r["loss/grad_norm"])) for r in rows)
    # Signal: a group whose episodes' returns differ. Its steps must get some non-zero advantage.
    assert len(seen) == 2
    signal = 0
    for batch, adv in seen:
        for g in np.unique(batch.group):
            rows = batch.group == g
            trajs = np.unique(batch.traj[rows])
            returns = [batch.reward[rows & (batch.traj == k)].sum() for k in trajs]
            if np.ptp(returns) > 1e-6:
                signal += 1
                assert np.any(adv[rows] != 0), f"{name}: zero advantages for group {g} {returns}"
    assert signal > 0  # the smoke batches have signal (else this check would be empty)


def test_outputs_of_a_run(tmp_path):
    _run(tmp_path, "trainer.loggers=[tensorboard]", "trainer.plot=true", "trainer.eval_every=1")
    names = {p.name for p in tmp_path.iterdir()}
    assert {
        "metrics.jsonl",
        "summary.json",
        "summary.md",
        "training_curve.png",
        "config.yaml",
        "checkpoints",
        "tb",
    } <= names
    assert any((tmp_path / "tb").iterdir())
    assert (tmp_path / "checkpoints" / "final" / "model.safetensors").exists()
    summary = json.loads((tmp_path / "summary.json").read_text())["summary"]
    for key in (
        "initial_success_rate",
        "initial_ci_low",
        "final_success_rate",
        "final_ci_high",
        "improvement_points",
        "intervals_disjoint",
        "verdict",
    ):
        assert key in summary
    assert "initial policy" in (tmp_path / "summary.md").read_text()


def test_resume_reproduces_the_uninterrupted_run(tmp_path):
    base = [
        "trainer.iterations=4",
        "trainer.checkpoint_every=2",
        "trainer.keep_checkpoints=5",
        "trainer.eval_initial=false",
        # the interruption is simulated by a shorter run; a schedule depends on the run's length
        "trainer.lr_schedule=constant",
    ]
    _run(tmp_path / "full", *base)
    # The interrupted run: stop after 2 iterations (its checkpoint at 2), then resume to 4.
    _run(tmp_path / "part", *base[1:], "trainer.iterations=2")
    _run(tmp_path / "resumed", *base, f"trainer.resume={tmp_path / 'part'}")
    full = [r for r in _rows(tmp_path / "full") if r["phase"] == "train"]
    resumed = [r for r in _rows(tmp_path / "resumed") if r["phase"] == "train"]
    assert [r["iteration"] for r in resumed] == [1, 2, 3, 4]
    for a, b in zip(full, resumed):
        for k, v in a.items():
            if k.startswith(("train/", "loss/", "credit/")):
                assert v == pytest.approx(b[k], rel=1e-6, abs=1e-7), (a["iteration"], k)


def test_non_finite_advantages_stop_with_a_message_and_keep_the_checkpoint(tmp_path, monkeypatch):
    import numpy as np

    import agentrl.learner.update as learner_mod  # where the learner maps step to token advantages

    calls = {"n": 0}
    real = learner_mod.step_to_tokens

    def poisoned(adv, token_step):
        calls["n"] += 1
        if calls["n"] > 1:  # iteration 2 (one micro-batch per iteration here) goes bad
            adv = np.full_like(adv, np.inf)
        return real(adv, token_step)

    monkeypatch.setattr(learner_mod, "step_to_tokens", poisoned)
    cfg = load_config(
        make_cfg(
            *SMOKE,
            "trainer.eval_initial=false",
            "trainer.epochs=1",
            "trainer.minibatch_size=256",
            "trainer.micro_batch_size=256",
        )
    )
    with pytest.raises(TrainingStopped, match="non-finite"):
        train(cfg, tmp_path)
    assert (tmp_path / "checkpoints" / "iter_000001" / "state.pt").exists()
    assert not (tmp_path / "checkpoints" / "iter_000002").exists()
    assert _rows(tmp_path)[-1]["phase"] == "stopped"
