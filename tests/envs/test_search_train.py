"""A 2-iteration training run on agentrl/Search-v0 (the env=search preset), as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_two_iterations_on_the_search_preset(tmp_path):
    pytest.importorskip("torch")
    cmd = [sys.executable, "-m", "agentrl.train", "env=search", "trainer.iterations=2"]
    cmd += ["rollout.tasks_per_iter=2", "rollout.group_size=4", "env.eval_episodes=8"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [*cmd, f"output_dir={tmp_path}"], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["phase"] for r in rows] == ["eval_initial", "train", "train", "eval_final", "summary"]
    final = rows[3]
    for kind in ("1-hop", "2-hop", "3-hop", "comparison"):  # a category per hop count
        assert f"eval/Search-v0/synthetic_{kind}/success_rate" in final, sorted(final)
