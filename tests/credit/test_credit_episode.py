"""GRPO and RLOO: hand-computed numbers for both statistics conventions."""

from __future__ import annotations

import numpy as np
import pytest
from agentrl.credit import StepBatch, compute

EPS = 1e-6


@pytest.fixture
def batch():
    # group 0: traj 0 rewards [0, 1] (R=1, 2 steps), traj 1 [0] (R=0, 1 step), traj 2 [1, 0, 1] (R=2, 3 steps)
    # group 1: traj 3 [5] (a group of one rollout)
    return StepBatch.from_trajectories(
        [
            dict(group=0, rewards=[0, 1], states=["a", "b"], valid=[True, False]),
            dict(group=0, rewards=[0], states=["a"]),
            dict(group=0, rewards=[1, 0, 1], states=["a", "c", "d"]),
            dict(group=1, rewards=[5], states=["z"]),
        ]
    )


def test_grpo_per_trajectory(batch):
    # mean R = (1 + 0 + 2) / 3 = 1; unbiased std = sqrt((0 + 1 + 1) / 2) = 1
    # A = (R - 1) / (1 + eps) -> traj0 0, traj1 -1, traj2 +1; the lone rollout: 5 / (1 + eps)
    a = compute(batch, "grpo").advantages
    exp = np.array([0, 0, -1, 1, 1, 1, 5]) / (1 + EPS)
    np.testing.assert_allclose(a, exp, rtol=1e-6)
    a = compute(batch, "grpo", mode="mean").advantages
    np.testing.assert_allclose(a, [0, 0, -1, 1, 1, 1, 5])
    a = compute(batch, "grpo", mode="mean", singleton="zero").advantages
    assert a[-1] == 0


def test_grpo_per_step_rows(batch):
    # rows of group 0 carry R = [1, 1, 0, 2, 2, 2]: mean = 8/6 = 4/3
    # deviations [-1/3, -1/3, -4/3, 2/3, 2/3, 2/3]; squares sum = (1 + 1 + 16 + 4 + 4 + 4)/9 = 30/9
    # unbiased var = (30/9) / 5 = 2/3; std = sqrt(2/3) = 0.8164966
    a = compute(batch, "grpo", stats="per_step_rows").advantages
    std = np.sqrt(2 / 3)
    exp = np.array([-1 / 3, -1 / 3, -4 / 3, 2 / 3, 2 / 3, 2 / 3]) / (std + EPS)
    np.testing.assert_allclose(a[:6], exp, rtol=1e-6)
    assert a[6] == pytest.approx(5 / (1 + EPS))


def test_grpo_invalid_penalty(batch):
    # row 1 (traj 0, t=1) is invalid; c = 0.5 lowers that row's score: scores [1, 0.5, 0, 2, 2, 2]
    # per step rows, mean mode: mean = 7.5 / 6 = 1.25 -> [-0.25, -0.75, -1.25, 0.75, 0.75, 0.75]
    a = compute(batch, "grpo", mode="mean", stats="per_step_rows", invalid_penalty=0.5).advantages
    np.testing.assert_allclose(a[:6], [-0.25, -0.75, -1.25, 0.75, 0.75, 0.75], rtol=1e-6)
    # per trajectory: statistics over R (mean 1), each row's score minus it: [0, -0.5, -1, 1, 1, 1]
    a = compute(batch, "grpo", mode="mean", invalid_penalty=0.5).advantages
    np.testing.assert_allclose(a[:6], [0, -0.5, -1, 1, 1, 1], rtol=1e-6)


def test_rloo(batch):
    # per trajectory: n = 3, A = 3/2 (R - 1) -> [0, -1.5, 1.5]; the lone rollout keeps R = 5
    a = compute(batch, "rloo").advantages
    np.testing.assert_allclose(a, [0, 0, -1.5, 1.5, 1.5, 1.5, 5])
    # equivalently R_i minus the mean of the others: traj1: 0 - (1 + 2)/2 = -1.5
    assert a[2] == pytest.approx(0 - (1 + 2) / 2)
    assert compute(batch, "rloo", singleton="zero").advantages[-1] == 0
    # per step rows: n = 6 rows, A = 6/5 (R - 4/3): traj0 -0.4, traj1 -1.6, traj2 0.8
    a = compute(batch, "rloo", stats="per_step_rows").advantages
    np.testing.assert_allclose(a[:6], [-0.4, -0.4, -1.6, 0.8, 0.8, 0.8], rtol=1e-6)


def test_all_equal_group_gives_exact_zeros():
    b = StepBatch.from_trajectories(
        [dict(group=0, rewards=[0.1, 0.2], states=["a", "b"]) for _ in range(3)]
    )
    for name in ("grpo", "rloo"):
        for stats in ("per_trajectory", "per_step_rows"):
            assert (compute(b, name, stats=stats).advantages == 0).all()
