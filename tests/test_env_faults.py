"""Env faults in rollouts and training: an env fault costs its episode, never the run.

The rollout loop records a pool fault on its episode without the invalid-action penalty and
counts it; a training run with a faulty env (``pool_envs.FaultySokoban``, registered through a
real ``agentrl.envs`` entry point as ``Fragile-v0``) finishes with exit 0, leaves the faulted
episodes out of credit and counts them in ``metrics.jsonl`` and the summary; an env that faults
in more than ``env.max_error_rate`` of an iteration's episodes stops the run with one line.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from pool_envs import FaultySokoban

from agentrl.backends.base import SamplingParams
from agentrl.backends.hf import HFBackend
from agentrl.models import load_model
from agentrl.pool import EnvPool
from agentrl.rollout import (
    ActionFormat,
    PromptBuilder,
    PromptConfig,
    ResetSpec,
    RolloutStats,
    run_episodes,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, tok, _ = load_model("tiny")
    return model, tok


def _play(tiny, pool, seeds):
    model, tok = tiny
    stats = RolloutStats()
    builder = PromptBuilder(tok, PromptConfig(instruction=False, history=0,
                                              admissible_actions=False, observation_prefix=""))  # fmt: skip
    eps = run_episodes(
        pool,
        HFBackend(model, tok.pad_token_id),
        builder,
        ActionFormat(),
        [ResetSpec(k, seed=s) for k, s in enumerate(seeds)],
        SamplingParams(max_new_tokens=8, seed=0),
        max_steps=4,
        constrained=True,  # every action the policy takes is valid
        stats=stats,
    )
    return eps, stats


def test_an_env_fault_is_counted_and_costs_no_invalid_penalty(tiny):
    # Seeds divisible by 2 fault at their 2nd step (a None observation): those episodes end
    # truncated with the fault recorded, every step still valid (the penalty is for the policy's
    # invalid actions, not for an env's bug), and the rollout stats count them.
    fn = functools.partial(FaultySokoban, fault="none_obs", every=2, at_step=2)
    with EnvPool([fn] * 4, num_workers=0) as pool:
        eps, stats = _play(tiny, pool, [2, 3, 4, 5])
    faulted = [ep for ep in eps if ep.fault is not None]
    assert [ep.seed for ep in faulted] == [2, 4]
    for ep in faulted:
        assert ep.fault == "observation" and ep.truncated and len(ep.steps) == 2
        assert "observation is None" in ep.error and ep.error.startswith("env ")
    assert all(s.valid for ep in eps for s in ep.steps)
    assert stats.episodes == 4 and stats.env_errors == {"observation": 2}


def test_a_not_replayable_env_loses_its_worker_mates_without_penalty(tiny):
    # A segfault in env 0 of a worker holding envs 0 and 1, whose env declares itself not
    # replayable: both episodes end (crash, lost), both counted, neither charged a penalty.
    fn = functools.partial(_one_shot_faulty, fault="segfault", every=2, at_step=2)
    with EnvPool([fn] * 2, num_workers=1) as pool:
        eps, stats = _play(tiny, pool, [2, 3])
    assert [ep.fault for ep in eps] == ["crash", "lost"]
    assert all(ep.truncated for ep in eps) and all(s.valid for ep in eps for s in ep.steps)
    assert stats.env_errors == {"crash": 1, "lost": 1} and stats.env_restarts == 1


class _OneShotFaulty(FaultySokoban):
    """Declares itself not replayable: after a restart its episodes end instead."""

    metadata = {**FaultySokoban.metadata, "replayable": False}


def _one_shot_faulty(**kwargs) -> _OneShotFaulty:
    return _OneShotFaulty(**kwargs)


# -- training runs through the real CLI -----------------------------------------------------------
SMALL = [
    "trainer=smoke",
    "trainer.checkpoint_every=0",
    "rollout.tasks_per_iter=4",
    "rollout.group_size=2",
    "env.eval_episodes=4",
    "seed=0",
]


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory) -> str:
    """A site folder whose distribution metadata declares ``pool_envs:register`` as an
    ``agentrl.envs`` entry point (as ``pip install`` of a plug-in would), for the run's
    PYTHONPATH: the trainer and its env workers find ``Fragile-v0`` by id."""
    site = tmp_path_factory.mktemp("site")
    dist = site / "fragile_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fragile-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[agentrl.envs]\nfragile = pool_envs:register\n")
    return os.pathsep.join([str(site), str(ROOT / "tests"), str(ROOT)])


def _train(plugin_path: str, out: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=plugin_path)
    cmd = [sys.executable, "-m", "agentrl.train", "env.id=Fragile-v0", *SMALL, *overrides,
           f"output_dir={out}"]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=out.parent)


def _train_rows(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r.get("phase") == "train"]


@pytest.mark.parametrize(
    ("fault", "workers", "kind"),
    [("nan_reward", 0, "reward"), ("segfault", 2, "crash")],
    ids=["nan-reward-in-process", "segfault-in-a-worker"],
)
def test_a_training_run_with_a_faulty_env_finishes_and_counts_the_errors(
    plugin_path, tmp_path, fault, workers, kind
):
    out = tmp_path / "run"
    proc = _train(plugin_path, out, f"+env.kwargs.fault={fault}", "+env.kwargs.every=2",
                  f"env.num_workers={workers}", "env.max_error_rate=0.9")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _train_rows(out)
    assert len(rows) == 2
    errors = sum(r.get(f"env/errors/{kind}", 0) for r in rows)
    assert errors > 0 and errors == sum(r.get("env/errors", 0) for r in rows)
    # the faulted episodes are not in the step batch: every trained step is a healthy one's
    assert all(r["train/agent_steps"] > 0 for r in rows)
    summary = json.loads((out / "summary.json").read_text())["summary"]
    assert summary["env_errors"] == errors and summary[f"env_errors/{kind}"] == errors
    if fault == "segfault":  # worker mates of the crashed env were replayed, not lost
        assert sum(r.get("env/replayed_episodes", 0) for r in rows) > 0
        assert "env/errors/lost" not in json.dumps(rows)


def test_a_broken_env_stops_the_run_with_one_line(plugin_path, tmp_path):
    out = tmp_path / "run"
    proc = _train(plugin_path, out, "+env.kwargs.fault=list_info", "+env.kwargs.every=1",
                  "trainer.eval_initial=false")  # fmt: skip
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "max_error_rate" in ln]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("training stopped: iteration 1: env Fragile-v0 looks broken")
    assert "8 of 8 episodes ended in env errors (info 8), over env.max_error_rate=0.5" in lines[0]
    assert "info is [" in lines[0]  # the example says what was wrong
