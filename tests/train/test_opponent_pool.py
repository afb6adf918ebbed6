"""Frozen earlier policies as opponents (``rollout.opponents``' pool) on real tic-tac-toe with the
tiny model: the pool fills at its versions and stays bounded, a pool opponent samples with the
frozen weights (its log-probs are the frozen copy's, after the live policy changed), only the
learner's seats reach the step batch, bad values are refused in one line, and a run completes."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from agentrl.config import ConfigError, load_config
from agentrl.pool import ResetSpec
from agentrl.recipe import build, train
from agentrl.rollout.batch import to_step_batch
from agentrl.rollout.opponents import OpponentPool, draw_opponents
from agentrl.train import prepare
from agentrl.training import producer
from agentrl.training.iteration import train_resets
from agentrl.training.producer import opponent_pool

from .helpers import SMOKE, make_cfg

pytest.importorskip("pyspiel")

GAME = [*SMOKE, "env=tictactoe", "model.max_new_tokens=10", "trainer.num_threads=1"]


@pytest.fixture(scope="module")
def parts():
    cfg = load_config(make_cfg(*GAME, "rollout.opponents={pool: 1}"))
    p = build(cfg)
    yield cfg, p
    p.runner.close()


def test_pool_takes_due_versions_and_stays_bounded(parts):
    cfg, p = parts
    pool = OpponentPool(p.model, p.tokenizer, every=3, size=2, extra=1)
    taken = [v for v in range(11) if pool.offer(v)]
    assert taken == [0, 3, 6, 9]
    assert pool.versions() == [3, 6, 9]  # size + extra kept, the oldest dropped
    assert pool.members(7) == [3, 6] and pool.members(9) == [6, 9] and pool.members(2) == []
    # trainable tensors only, copies: a later change of the model leaves them as they were
    snap = pool._members[9]
    names = {n for n, q in p.model.named_parameters() if q.requires_grad}
    assert set(snap) == names
    assert all(snap[n].data_ptr() != q.data_ptr() for n, q in p.model.named_parameters())


def test_each_game_draws_its_opponent_from_its_seed():
    mix = {"self": 1.0, "pool": 1.0, "random": 2.0}
    resets = [ResetSpec(g, seed=100 + g) for g in range(400) for _ in range(2)]
    a = draw_opponents(resets, mix, seed=0, it=3, upto=3)
    assert a == draw_opponents(resets, mix, seed=0, it=3, upto=3)  # seeded
    assert a != draw_opponents(resets, mix, seed=1, it=3, upto=3)
    for x, y in zip(a[::2], a[1::2]):  # a group's rollouts play the same opponent
        assert x == y
    names = [r.options["opponent"] if r.opponent is None else "pool" for r in a[::2]]
    share = {k: names.count(k) / len(names) for k in mix}
    assert abs(share["random"] - 0.5) < 0.08 and abs(share["pool"] - 0.25) < 0.08
    pool_games = [r for r in a if r.opponent is not None]
    assert all(r.options["opponent"] == "self" and r.opponent["upto"] == 3 for r in pool_games)


def _logprobs(model, step) -> list[float]:
    """The log-probs of a step's response tokens under ``model`` as the sampler reports them
    (temperature 1, renormalised over the allowed tokens under constrained decoding)."""
    ids = torch.tensor([step.prompt_ids + step.response_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    out = []
    for t, tok in enumerate(step.response_ids):
        row = logits[len(step.prompt_ids) + t - 1]
        ok = step.allowed[t] if step.allowed is not None else range(row.numel())
        out.append(float(row[tok] - torch.logsumexp(row[list(ok)], 0)))
    return out


def test_pool_opponent_plays_the_frozen_weights_and_is_never_trained(parts):
    cfg, p = parts
    pool = opponent_pool(cfg, p)
    assert pool.offer(0)
    frozen = copy.deepcopy(p.model).eval()
    live = {n: q.detach().clone() for n, q in p.model.named_parameters()}
    try:
        with torch.no_grad():  # the live policy moves on after the snapshot
            gen = torch.Generator().manual_seed(0)
            for q in p.model.parameters():
                q.add_(0.05 * torch.randn(q.shape, generator=gen))
        p.runner.opponents = pool
        eps = p.runner.play(train_resets(cfg, 1, None), temperature=1.0, seed=3)
        _check_frozen_and_learner_steps(eps, frozen, p.model.eval())
    finally:
        p.runner.opponents = None
        with torch.no_grad():
            for n, q in p.model.named_parameters():
                q.copy_(live[n])


def _check_frozen_and_learner_steps(eps, frozen, moved) -> None:
    gaps = []
    for ep in eps:
        seat = ep.seed % 2
        learner, other = f"player_{seat}", f"player_{1 - seat}"
        assert ep.frozen == [other] and ep.seats == [learner]
        assert ep.task_id == f"pool:0@{seat}#{ep.seed}"
        for s in ep.steps:
            got = np.asarray(s.logprobs)
            own = np.asarray(_logprobs(frozen if s.agent == other else moved, s))
            np.testing.assert_allclose(got, own, atol=2e-4)
            if s.agent == other:  # not the live policy's
                gaps.append(np.abs(got - np.asarray(_logprobs(moved, s))).max())
    assert gaps and max(gaps) > 1e-2
    batch, seqs = to_step_batch(eps)
    learner_steps = sum(s.agent not in ep.frozen for ep in eps for s in ep.steps)
    assert len(seqs) == len(batch.reward) == learner_steps < sum(len(ep.steps) for ep in eps)
    for ep in eps:  # every row of a game is its learner's, in a group of the learner's role
        rows = batch.traj // 16 == ep.traj
        assert set(batch.extras["agent"][rows]) == set(ep.seats)
        assert set(batch.group[rows] % 16) == {ep.seed % 2}


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("{self: x}", "rollout.opponents weight of 'self' must be a finite number >= 0, got 'x'"),
        ("[self, pool]", "rollout.opponents must map opponents to weights"),
        ("{self: 0}", "rollout.opponents weights must not all be 0"),
        ("{self: 1, randm: 1}", "rollout.opponents: 'randm': unknown opponent 'randm'"),
    ],
)
def test_bad_opponents_are_refused_in_one_line(value, says):
    with pytest.raises(ConfigError) as exc:
        prepare(make_cfg(*GAME, f"rollout.opponents={value}"), None)
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_the_command_line_refuses_bad_opponents_in_one_line(tmp_path):
    cmd = [sys.executable, "-m", "agentrl.train", "env=kuhn", "rollout.opponents={self: 1, mcts\\:5: 1}",
           f"output_dir={tmp_path}"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "rollout.opponents: 'mcts:5'" in lines[0], out.stderr
    assert "kuhn_poker is not one" in lines[0]


def test_pool_needs_a_game_env_and_no_second_opponent_setting():
    with pytest.raises(ConfigError, match="rollout.opponents needs a multi-agent env"):
        prepare(make_cfg(*SMOKE, "rollout.opponents={pool: 1}"), None)
    with pytest.raises(ConfigError, match="replaces env.kwargs.opponent='random'.*only one"):
        prepare(make_cfg(*GAME, "rollout.opponents={pool: 1}", "env.kwargs.opponent=random"), None)


def test_a_run_against_the_pool_completes(tmp_path, monkeypatch):
    taken = []
    offer = OpponentPool.offer

    def spy(self, version, weights=None):
        ok = offer(self, version, weights)
        taken.extend([version] if ok else [])
        return ok

    monkeypatch.setattr(OpponentPool, "offer", spy)
    cfg = load_config(
        make_cfg(*GAME, "rollout.opponents={self: 1, pool: 3}", "rollout.opponent_pool.every=2")
    )
    summary = train(cfg, tmp_path)
    assert summary.iterations == 2 and summary.eval_episodes == 4
    assert taken == [0, 2]  # the initial policy and version 2 (after the second update)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    rows = [r for r in map(json.loads, lines) if r.get("phase") == "train"]
    assert sum(r.get("opponents/pool_games", 0) for r in rows) > 0
    # resumed: the pool refills from the run's checkpoints at its versions (version 0, the
    # initial policy, has none), then takes the resumed version when due
    refilled = []
    refill = producer.refill_pool
    monkeypatch.setattr(producer, "refill_pool", lambda *a: refilled.extend(refill(*a)) or [])
    taken.clear()
    cfg = load_config(
        make_cfg(
            *GAME,
            "rollout.opponents={self: 1, pool: 3}",
            "rollout.opponent_pool.every=1",
            "trainer.iterations=3",
            f"trainer.resume={tmp_path}",
        )  # fmt: skip
    )
    train(cfg, tmp_path / "resumed")
    assert refilled == [1] and taken == [1, 2, 3]  # checkpoint 1; 2 is the resumed weights


def test_a_game_plays_the_opponent_its_reset_names():
    from agentrl import envs

    env = envs.make("TicTacToe-v0", opponent="random")
    _obs, info = env.reset(seed=7, options={"opponent": "mcts:2"})
    assert info["task_id"] == "mcts:2@1#7" and info["seats"] == ["player_1"]
    _obs, info = env.reset(seed=7, options={"opponent": "self"})  # over the env's own draw
    assert info["task_id"] == "self#7" and info["seats"] == ["player_0", "player_1"]
    _obs, info = env.reset(seed=7)
    assert info["task_id"] == "random@1#7"
