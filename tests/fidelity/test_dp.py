"""The dynamic programme against a hand-solved three-state example, and its invariants."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.fidelity.mdp import (
    TabularMDP,
    distance_to_win,
    evaluate_policy,
    stack,
    success_probability,
)
from agentrl.fidelity.policies import softmax_policy, uniform_policy

from .toy import A, B, three_state


def test_uniform_policy_two_steps_left_by_hand():
    # k = 1: Q1(A) = (0, -1), V1(A) = -0.5; Q1(B) = (10, 0), V1(B) = 5.
    # k = 2: Q2(A) = (0 + V1(B), -1 + V1(A)) = (5, -1.5), V2(A) = 1.75;
    #        Q2(B) = (10, 0 + V1(A)) = (10, -0.5), V2(B) = 4.75.
    mdp = three_state(2)
    v = evaluate_policy(mdp, uniform_policy(mdp), gamma=1.0)
    np.testing.assert_allclose(v.V[1], [-0.5, 5.0, 0.0])
    np.testing.assert_allclose(v.Q[2][A], [5.0, -1.5])
    np.testing.assert_allclose(v.Q[2][B], [10.0, -0.5])
    np.testing.assert_allclose(v.V[2], [1.75, 4.75, 0.0])
    # A2(A, a0) = 5 - 1.75 = 3.25; A1(B, a1) = 0 - 5 = -5.
    np.testing.assert_allclose(
        v.advantage(np.array([A, B]), np.array([0, 1]), np.array([2, 1])), [3.25, -5.0]
    )


def test_discount_by_hand():
    # gamma = 0.5, k = 2: Q2(A) = (0 + 0.5 * 5, -1 + 0.5 * -0.5) = (2.5, -1.25), V2(A) = 0.625;
    # Q2(B) = (10, 0 + 0.5 * -0.5) = (10, -0.25), V2(B) = 4.875.
    mdp = three_state(2)
    v = evaluate_policy(mdp, uniform_policy(mdp), gamma=0.5)
    np.testing.assert_allclose(v.Q[2][A], [2.5, -1.25])
    np.testing.assert_allclose(v.V[2], [0.625, 4.875, 0.0])


def test_skewed_policy_and_three_steps_by_hand():
    mdp = three_state(3)
    pi = np.array([[0.75, 0.25]] * 3)
    v = evaluate_policy(mdp, pi, gamma=1.0)
    # k = 1: V1(A) = 0.25 * -1 = -0.25, V1(B) = 0.75 * 10 = 7.5.
    # k = 2: Q2(A) = (7.5, -1.25), V2(A) = 5.625 - 0.3125 = 5.3125.
    np.testing.assert_allclose(v.V[1][:2], [-0.25, 7.5])
    np.testing.assert_allclose(v.Q[2][A], [7.5, -1.25])
    np.testing.assert_allclose(v.V[2][A], 5.3125)
    # Uniform, k = 3: Q3(A) = (0 + V2(B), -1 + V2(A)) = (4.75, 0.75), V3(A) = 2.75.
    u = evaluate_policy(mdp, uniform_policy(mdp), gamma=1.0)
    np.testing.assert_allclose(u.Q[3][A], [4.75, 0.75])
    np.testing.assert_allclose(u.V[3][A], 2.75)


def test_success_probability_and_distance_by_hand():
    # Uniform from A with 2 steps: a0 (1/2) to B, then a0 (1/2) wins: 1/4. With 3 steps:
    # A-a0-B-a0 (1/4) + A-a1-A-a0-B-a0 (1/8) + A-a0-B-a1-A... (no win in time) = 3/8.
    np.testing.assert_allclose(
        success_probability(three_state(2), uniform_policy(three_state(2))), [0.25]
    )
    np.testing.assert_allclose(
        success_probability(three_state(3), uniform_policy(three_state(3))), [0.375]
    )
    np.testing.assert_array_equal(distance_to_win(three_state(3)), [2.0, 1.0, np.inf])


def test_policy_checks():
    mdp = three_state()
    with pytest.raises(ValueError, match="probability"):
        evaluate_policy(mdp, np.full((3, 2), 0.4))
    with pytest.raises(ValueError, match="shape"):
        evaluate_policy(mdp, np.full((2, 2), 0.5))
    with pytest.raises(ValueError, match="gamma"):
        evaluate_policy(mdp, uniform_policy(mdp), gamma=1.5)
    masked = TabularMDP(
        **{**three_state().__dict__, "mask": np.array([[True, False], [True, True], [True, True]])}
    )
    with pytest.raises(ValueError, match="inadmissible"):
        evaluate_policy(masked, np.full((3, 2), 0.5))


def test_stack_offsets_states_and_keeps_values():
    one = three_state(2)
    both = stack([one, one])
    assert both.num_states == 6 and list(both.start) == [0, 3]
    v = evaluate_policy(both, uniform_policy(both))
    np.testing.assert_allclose(v.V[2], [1.75, 4.75, 0.0] * 2)
    assert len(set(both.state_keys)) == 6


@st.composite
def random_mdp(draw):
    S = draw(st.integers(1, 6))
    A_ = draw(st.integers(1, 4))
    H = draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    done = rng.random((S, A_)) < 0.3
    won = done & (rng.random((S, A_)) < 0.5)
    mask = rng.random((S, A_)) < 0.8
    mask[np.arange(S), rng.integers(0, A_, S)] = True
    mdp = TabularMDP(
        next_state=rng.integers(0, S, (S, A_)),
        reward=rng.normal(size=(S, A_)),
        done=done,
        won=won,
        milestone=np.zeros((S, A_), dtype=np.int64),
        mask=mask,
        start=np.array([0]),
        horizon=H,
        state_keys=tuple(map(str, range(S))),
        action_names=tuple(map(str, range(A_))),
    )
    return mdp, softmax_policy(rng.normal(size=(S, A_)) * 2, mask), float(rng.uniform(0, 1))


@settings(max_examples=60, deadline=None)
@given(random_mdp())
def test_advantage_has_zero_mean_under_the_policy(case):
    mdp, pi, gamma = case
    v = evaluate_policy(mdp, pi, gamma)
    adv = v.Q - v.V[:, :, None]
    np.testing.assert_allclose(np.einsum("sa,ksa->ks", pi, adv), 0.0, atol=1e-9)
    p = success_probability(mdp, pi)
    assert np.all((p >= -1e-12) & (p <= 1 + 1e-12))
