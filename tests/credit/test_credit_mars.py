"""MARS: per-agent normalised turn-level returns, hand-computed; per-agent GRPO and GiGPO on the
same self-play batch (roles in their own groups, anchors on information states)."""

from __future__ import annotations

import numpy as np
import pytest
from agentrl.credit import StepBatch

from agentrl import credit


def _selfplay_batch(**changes) -> StepBatch:
    """Two self-play games, each split into x's and o's trajectories (as the rollout splits
    them): game 1 x wins (x: 0, 0, +1; o: 0, -1), game 2 o wins (x: 0, -1; o: 0, +1)."""
    traj = [0, 0, 0, 1, 1, 2, 2, 3, 3]
    group = [0, 0, 0, 1, 1, 0, 0, 1, 1]  # task group x role (x: 0, o: 1)
    t = [0, 1, 2, 0, 1, 0, 1, 0, 1]
    reward = [0, 0, 1, 0, -1, 0, -1, 0, 1]
    done = [False, False, True, False, True, False, True, False, True]
    agent = ["x"] * 3 + ["o"] * 2 + ["x"] * 2 + ["o"] * 2
    keys = ["e", "x1", "x2", "o0", "o1", "e", "x1b", "o0", "o1b"]
    cols = dict(
        group=group,
        traj=traj,
        t=t,
        reward=reward,
        done=done,
        state_key=keys,
        action_key=["a"] * 9,
        valid=[True] * 9,
        extras={
            "agent": np.array(agent, dtype=object),
            "category": np.array(["ttt"] * 9, dtype=object),
        },
    )
    return StepBatch(**{**cols, **changes})


def test_mars_hand_computed():
    b = _selfplay_batch()
    res = credit.compute(b, "mars", mode="mean")
    # gamma 1 turn returns: x: 1, 1, 1 | -1, -1 ; o: -1, -1 | 1, 1
    R = res.components["returns"]
    assert R.tolist() == [1, 1, 1, -1, -1, -1, -1, 1, 1]
    x_mean = (3 - 2) / 5  # x's five turns
    o_mean = 0.0  # o's four turns
    expect = [1 - x_mean] * 3 + [-1 - o_mean] * 2 + [-1 - x_mean] * 2 + [1 - o_mean] * 2
    np.testing.assert_allclose(res.advantages, expect, rtol=1e-6)
    z = credit.compute(b, "mars").advantages  # mean_std: each agent divided by its own std
    x = np.array([1, 1, 1, -1, -1], dtype=float)
    np.testing.assert_allclose(
        z[[0, 1, 2, 5, 6]], (x - x.mean()) / (x.std(ddof=1) + 1e-6), rtol=1e-5
    )


def test_mars_discount_penalty_and_reward_norm():
    b = _selfplay_batch()
    g = credit.compute(b, "mars", gamma=0.5, mode="mean").components["returns"]
    assert g.tolist()[:3] == [0.25, 0.5, 1.0]
    pen = _selfplay_batch(valid=[True, False] + [True] * 7)
    r = credit.compute(pen, "mars", mode="mean", invalid_penalty=0.5).components["returns"]
    assert r.tolist()[:3] == [0.5, 0.5, 1.0]  # the penalty is a turn score: it reaches turn 0
    c = credit.compute(b, "mars", mode="mean", reward_norm="mean").components["returns"]
    # x's rewards 0, 0, 1, 0, -1 centred by their mean 0: unchanged; o's 0, -1, 0, 1 too
    assert c.tolist() == R_EXPECTED


R_EXPECTED = [1, 1, 1, -1, -1, -1, -1, 1, 1]


def test_mars_without_agents_is_one_cell_and_groups_scope():
    b = _selfplay_batch()
    single = _selfplay_batch(extras={})
    a = credit.compute(single, "mars", mode="mean").advantages
    np.testing.assert_allclose(a, np.array(R_EXPECTED) - np.mean(R_EXPECTED), rtol=1e-6)
    assert credit.group_based("mars", scope="group") and not credit.group_based("mars")
    g = credit.compute(b, "mars", mode="mean", scope="group").advantages
    assert np.isfinite(g).all()
    with pytest.raises(ValueError, match="scope"):
        credit.compute(b, "mars", scope="everything")


def test_per_agent_grpo_and_gigpo_stay_within_roles():
    b = _selfplay_batch()
    grpo = credit.compute(b, "grpo", mode="mean").advantages
    # x's group {game 1: +1, game 2: -1} and o's {-1, +1}: roles never share a baseline
    np.testing.assert_allclose(grpo, [1, 1, 1, -1, -1, -1, -1, 1, 1], rtol=1e-6)
    gig = credit.compute(b, "gigpo", mode="mean", gamma=1.0, invalid_penalty=0.0)
    # the empty board "e" is x's anchor state in both games: step term +-1 around mean 0
    step = gig.components["step"]
    assert step[0] == pytest.approx(1.0) and step[5] == pytest.approx(-1.0)
    assert step[3] == pytest.approx(-1.0) and step[7] == pytest.approx(1.0)  # o's "o0"
    assert credit.needs("mars") == {"agent", "category"}
