"""End to end: self-play on real OpenSpiel games through the trainer, in the tag and the tool-call
action formats, with per-agent credit (MARS, GiGPO): one trajectory per agent reaches credit,
grouped by role, each agent's steps on its own tokens."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from agentrl import credit
from agentrl.config import load_config
from agentrl.recipe import train

from .helpers import SMOKE, make_cfg

pytest.importorskip("pyspiel")


def _spy(monkeypatch, name):
    seen, lookup = [], credit.registry.get

    @functools.wraps(lookup(name))
    def spy(batch, **opts):
        result = lookup(name)(batch, **opts)
        seen.append((batch, np.asarray(result.advantages)))
        return result

    monkeypatch.setattr(credit.registry, "get", lambda m: spy if m == name else lookup(m))
    return seen


@pytest.mark.parametrize(
    ("env", "name", "extra"),
    [
        ("tictactoe", "mars", ["model.max_new_tokens=10"]),
        ("kuhn", "gigpo", ["rollout.action_format=tool_call", "model.max_new_tokens=64"]),
    ],
)
def test_self_play_trains_with_per_agent_credit(tmp_path, monkeypatch, env, name, extra):
    seen = _spy(monkeypatch, name)
    cfg = load_config(
        make_cfg(*SMOKE, f"env={env}", f"credit={name}", "trainer.iterations=1", *extra)
    )
    summary = train(cfg, tmp_path)
    assert summary.iterations == 1 and summary.eval_episodes == 4
    ((batch, adv),) = seen
    agents = batch.extras["agent"]
    assert set(agents) == {"player_0", "player_1"}
    for k in np.unique(batch.traj):  # each trajectory is one agent's, in a group of its role
        rows = batch.traj == k
        assert len(set(agents[rows])) == 1
    for g in np.unique(batch.group):
        assert len(set(agents[batch.group == g])) == 1
    assert np.isfinite(adv).all() and np.any(adv != 0)
    # zero-sum: the two agents' returns in one game add up to 0
    ret = {k: batch.reward[batch.traj == k].sum() for k in np.unique(batch.traj)}
    games = {}
    for k, r in ret.items():
        games.setdefault(k // 16, []).append(r)
    assert all(len(v) == 2 and abs(sum(v)) < 1e-9 for v in games.values())
