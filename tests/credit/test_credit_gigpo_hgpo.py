"""GiGPO and HGPO on small groups worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest
from agentrl.credit import StepBatch, compute

EPS = 1e-6


def two_rollouts(valid1=None):
    # traj 0: states s0 s1 s2, rewards 0 0 1  -> G (gamma 0.5) = [0.25, 0.5, 1]
    # traj 1: states s0 s1 s3, rewards 0 0 -1 -> G = [-0.25, -0.5, -1]
    return StepBatch.from_trajectories(
        [
            dict(group=0, rewards=[0, 0, 1], states=["s0", "s1", "s2"]),
            dict(
                group=0, rewards=[0, 0, -1], states=["s0", "s1", "s3"], valid=valid1 or [True] * 3
            ),
        ]
    )


def test_gigpo_mean():
    # episode (rows): R = [1,1,1,-1,-1,-1], mean 0 -> A^E = +-1
    # anchors: s0 {0.25, -0.25} -> +-0.25; s1 {0.5, -0.5} -> +-0.5; s2, s3 alone -> 0
    a = compute(two_rollouts(), "gigpo", gamma=0.5, mode="mean", invalid_penalty=0).advantages
    np.testing.assert_allclose(a, [1.25, 1.5, 1.0, -1.25, -1.5, -1.0])


def test_gigpo_mean_std():
    # episode: rows +-1, mean 0, unbiased var = 6/5 -> std 1.0954451
    # s0: {0.25, -0.25}, std = sqrt(2 * 0.0625 / 1) = 0.3535534 -> +-0.25/0.3535534 = +-0.7071068
    # s1: {0.5, -0.5}, std = 0.7071068 -> +-0.7071068
    r = compute(two_rollouts(), "gigpo", gamma=0.5, invalid_penalty=0)
    e = 1 / (np.sqrt(1.2) + EPS)
    s0 = 0.25 / (np.sqrt(0.125) + EPS)
    s1 = 0.5 / (np.sqrt(0.5) + EPS)
    np.testing.assert_allclose(r.advantages, [e + s0, e + s1, e, -e - s0, -e - s1, -e], rtol=1e-6)
    assert r.diagnostics["step_group_sizes"] == {1: 2, 2: 2}
    assert r.diagnostics["step_singleton_fraction"] == pytest.approx(2 / 6)
    np.testing.assert_allclose(r.components["step"], [s0, s1, 0, -s0, -s1, 0], rtol=1e-6)


def test_gigpo_invalid_penalty_after_discounting():
    # traj 1, t=1 invalid, c = 0.1: its G = -0.5 - 0.1 = -0.6; G of t=0 stays -0.25 (not propagated)
    # its episode score = -1 - 0.1 = -1.1; rows [1,1,1,-1,-1.1,-1], mean = -0.1/6
    # s1 {0.5, -0.6}: mean -0.05 -> [0.55, -0.55]; s0 unchanged +-0.25
    a = compute(
        two_rollouts([True, False, True]), "gigpo", gamma=0.5, mode="mean", invalid_penalty=0.1
    ).advantages
    m = -0.1 / 6
    exp = [1 - m + 0.25, 1 - m + 0.55, 1 - m, -1 - m - 0.25, -1.1 - m - 0.55, -1 - m]
    np.testing.assert_allclose(a, exp, rtol=1e-6)


def test_gigpo_omega_and_episode_stats():
    b = two_rollouts()
    r = compute(
        b,
        "gigpo",
        gamma=0.5,
        mode="mean",
        omega=2.0,
        invalid_penalty=0,
        episode_stats="per_trajectory",
    )
    # per trajectory: R = {1, -1}, mean 0: same +-1 here; step term doubled
    np.testing.assert_allclose(r.advantages, [1.5, 2.0, 1.0, -1.5, -2.0, -1.0])


def test_gigpo_similarity_grouping():
    # s0 and s0' are different state keys but near-identical text (ratio >= 0.9): one anchor group
    text = {
        "s0": "You are in the kitchen. A fridge is here.",
        "s0'": "You are in the kitchen. A fridge is here!",
        "s1": "The fridge is open. It contains milk.",
    }
    b = StepBatch.from_trajectories(
        [
            dict(group=0, rewards=[0, 1], states=["s0", "s1"]),
            dict(group=0, rewards=[0, -1], states=["s0'", "s1"]),
        ]
    )
    b = StepBatch(
        **{
            k: getattr(b, k)
            for k in ("group", "traj", "t", "reward", "done", "state_key", "action_key", "valid")
        },
        extras={"observation": np.array([text[s] for s in b.state_key], dtype=object)},
    )
    exact = compute(b, "gigpo", gamma=1.0, mode="mean", invalid_penalty=0).components["step"]
    sim = compute(b, "gigpo", gamma=1.0, mode="mean", invalid_penalty=0, similarity=0.9).components[
        "step"
    ]
    # exact keys: s0 and s0' alone -> 0; s1 {1, -1} -> +-1
    np.testing.assert_allclose(exact, [0, 1, 0, -1])
    # similarity: {s0, s0'} -> G {1, -1} -> +-1
    np.testing.assert_allclose(sim, [1, 1, -1, -1])
    with pytest.raises(ValueError, match="similarity"):
        compute(b, "gigpo", similarity=1.5)


def test_gigpo_similarity_needs_observation():
    with pytest.raises(Exception, match="observation"):
        compute(two_rollouts(), "gigpo", similarity=0.9)


def three_rollouts():
    # traj 0: s0 s1 s2, rewards 0 0 1  -> G (gamma 0.5) [0.25, 0.5, 1]
    # traj 1: s0 s1 s3, rewards 0 0 -1 -> G [-0.25, -0.5, -1]
    # traj 2: s4 s1 s2, rewards 0 0 1  -> G [0.25, 0.5, 1]
    return StepBatch.from_trajectories(
        [
            dict(group=0, rewards=[0, 0, 1], states=["s0", "s1", "s2"]),
            dict(group=0, rewards=[0, 0, -1], states=["s0", "s1", "s3"]),
            dict(group=0, rewards=[0, 0, 1], states=["s4", "s1", "s2"]),
        ]
    )


def test_hgpo_hierarchy_mean():
    # k=1 groups: s0 {0.25, -0.25} -> +-0.25; s1 {0.5, -0.5, 0.5}: mean 1/6 -> [1/3, -2/3, 1/3];
    #             s2 {1, 1} -> 0, 0 (dropped: exactly 0); s3, s4 alone.
    # k=2 groups (s_{t-1}, s_t): (s0,s1) {0.5, -0.5} -> +-0.5; (s1,s2) {1, 1} -> 0; others alone.
    # k=3 (history_length 2): (s0,s1,s2) alone, (s0,s1,s3) alone, (s4,s1,s2) alone.
    # weights (k+1)^1: k=1 -> 2, k=2 -> 3; result = sum(w a) / (sum(w) + eps)
    a = compute(three_rollouts(), "hgpo", gamma=0.5, mode="mean", invalid_penalty=0).advantages
    exp = [
        2 * 0.25 / (2 + EPS),  # traj0 t0: k1 only
        (2 * (1 / 3) + 3 * 0.5) / (5 + EPS),  # traj0 t1: k1 and k2
        0.0,  # traj0 t2: every item is 0
        2 * -0.25 / (2 + EPS),
        (2 * (-2 / 3) + 3 * -0.5) / (5 + EPS),
        0.0,  # s3 alone
        0.0,  # s4 alone
        2 * (1 / 3) / (2 + EPS),  # traj2 t1: (s4, s1) is alone at k=2
        0.0,
    ]
    np.testing.assert_allclose(a, exp, rtol=1e-6, atol=1e-12)


def test_hgpo_base_group():
    # base item (k=0, weight 1): episode rows R = [1]*3 + [-1]*3 + [1]*3, mean 1/3 -> [2/3, -4/3, 2/3]
    # traj0 t0: (1 * 2/3 + 2 * 0.25) / (3 + eps); traj0 t2: only the base item -> (2/3) / (1 + eps)
    a = compute(
        three_rollouts(), "hgpo", gamma=0.5, mode="mean", invalid_penalty=0, base_group=True
    ).advantages
    assert a[0] == pytest.approx((2 / 3 + 0.5) / (3 + EPS))
    assert a[2] == pytest.approx((2 / 3) / (1 + EPS))
    assert a[4] == pytest.approx((-4 / 3 + 2 * (-2 / 3) + 3 * -0.5) / (6 + EPS))


def test_hgpo_mean_std_uses_population_std():
    # k=1, s0 {0.25, -0.25}: population std 0.25 -> +-1/(1 + 4e-6); with history_length 0 only k=1 exists
    a = compute(three_rollouts(), "hgpo", gamma=0.5, history_length=0, invalid_penalty=0).advantages
    assert a[0] == pytest.approx(2 * (0.25 / (0.25 + EPS)) / (2 + EPS))


def test_hgpo_k1_groups_as_gigpo():
    b = three_rollouts()
    assert np.array_equal(b.history_levels(1)[0][0], b.anchor_index)
    h = compute(b, "hgpo", gamma=0.5, mode="mean", history_length=0, invalid_penalty=0).advantages
    g = compute(b, "gigpo", gamma=0.5, mode="mean", invalid_penalty=0).components["step"]
    np.testing.assert_allclose(h, g * 2 / (2 + EPS), rtol=1e-6)
