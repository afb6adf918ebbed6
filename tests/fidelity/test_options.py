"""Exact option values by hand, and HiPER's streams against them (unbiased with an exact critic)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl import credit
from agentrl.fidelity.hiper_lab import (
    HiperConfig,
    hiper_step_batch,
    paper_switch_advantage,
    render_hiper,
    run_hiper_fidelity,
    sample_option_groups,
    truths,
)
from agentrl.fidelity.options import (
    OptionPolicy,
    Subgoals,
    distance_to_subgoal,
    evaluate_options,
    option_policy,
)
from agentrl.fidelity.pickplace import make_task, pickplace_mdp, pickplace_subgoals

from .toy import A, B, C, three_state

NAMES = ("reach B", "win")


def toy_subgoals() -> Subgoals:
    return Subgoals(
        NAMES, np.array([[False, True, False], [False, False, False]]), np.array([False, True])
    )


def toy_policy() -> OptionPolicy:
    """beta = 0.5 and mu uniform everywhere; under "reach B": A -> a0, B -> a1 (back to A);
    under "win": A uniform, B -> a0 (wins)."""
    action = np.zeros((3, 2, 2))
    action[A, 0] = (1.0, 0.0)
    action[B, 0] = (0.0, 1.0)
    action[A, 1] = (0.5, 0.5)
    action[B, 1] = (1.0, 0.0)
    action[C] = 0.5
    return OptionPolicy(np.full((3, 2), 0.5), np.full((3, 2), 0.5), action, NAMES)


def test_option_values_by_hand():
    # k = 1 (U_0 = 0): Q1(A) = (0, -1), Q1(B) = (10, 0).
    #   V_low(1, A) = (0, -0.5), V_low(1, B) = (0, 10); V_high(1) = (-0.25, 5)
    #   U(1, A) = (-0.125, -0.375), U(1, B) = (2.5, 7.5)
    # k = 2: Q_low(2, A, g, a0) = U(1, B, g), Q_low(2, A, g, a1) = -1 + U(1, A, g)
    #   g0: (2.5, -1.125), V_low = 2.5; g1: (7.5, -1.375), V_low = 3.0625; V_high(2, A) = 2.78125
    #   B: Q_low(2, B, g, a0) = 10, Q_low(2, B, g, a1) = U(1, A, g)
    #   V_low(2, B) = (-0.125, 10), V_high(2, B) = 4.9375, U(2, B, g0) = 2.40625
    mdp = three_state(2)
    v = evaluate_options(mdp, toy_policy(), gamma=1.0)
    np.testing.assert_allclose(v.low[1, [A, B]], [[0.0, -0.5], [0.0, 10.0]])
    np.testing.assert_allclose(v.high[1, [A, B]], [-0.25, 5.0])
    np.testing.assert_allclose(v.term[1, [A, B]], [[-0.125, -0.375], [2.5, 7.5]])
    np.testing.assert_allclose(v.Q_low[2, A], [[2.5, -1.125], [7.5, -1.375]])
    np.testing.assert_allclose(v.low[2, A], [2.5, 3.0625])
    np.testing.assert_allclose(v.high[2, [A, B]], [2.78125, 4.9375])
    np.testing.assert_allclose(v.term[2, B, 0], 2.40625)
    k2 = np.array([2, 2])
    # A_low(2, A, win, a0) = 7.5 - 3.0625; A_low(2, A, win, a1) = -1.375 - 3.0625
    np.testing.assert_allclose(
        v.low_advantage(np.array([A, A]), np.array([1, 1]), np.array([0, 1]), k2),
        [4.4375, -4.4375],
    )
    # A_sub(2, A, g) = V_low(2, A, g) - V_high(2, A)
    np.testing.assert_allclose(
        v.subgoal_advantage(np.array([A, A]), np.array([0, 1]), k2), [-0.28125, 0.28125]
    )
    # A_sw(2, B, g'=reach B): SWITCH V_high - U = 2.53125, KEEP V_low - U = -2.53125, which is
    # the paper's (q - beta)(V_high - V_low) = +-0.5 * 5.0625; turn 0 (g' = -1): no decision, 0.
    np.testing.assert_allclose(
        v.switch_advantage(
            np.array([B, B, A]),
            np.array([0, 0, -1]),
            np.array([True, False, True]),
            np.array([2, 2, 2]),
        ),
        [2.53125, -2.53125, 0.0],
    )


def test_distance_to_subgoal_by_hand():
    d = distance_to_subgoal(three_state(3), toy_subgoals())
    np.testing.assert_array_equal(d[0, :2], [1.0, 0.0])  # reach B: A one step, B itself
    np.testing.assert_array_equal(d[1, :2], [2.0, 1.0])  # win: A -> B -> win


def test_option_policy_checks():
    mdp = three_state(2)
    bad = toy_policy()
    with pytest.raises(ValueError, match="'switch' must have shape"):
        OptionPolicy(bad.switch[:2], bad.subgoal, bad.action, NAMES).check(mdp)
    with pytest.raises(ValueError, match="probability distributions"):
        OptionPolicy(bad.switch, bad.subgoal * 2, bad.action, NAMES).check(mdp)


def _random_policy(mdp, rng) -> OptionPolicy:
    S, A_ = mdp.mask.shape
    action = rng.dirichlet(np.ones(A_), size=(S, 2))
    return OptionPolicy(
        rng.uniform(0.05, 0.95, (S, 2)), rng.dirichlet(np.ones(2), size=S), action, NAMES
    )


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_turn_advantage_decomposes(seed):
    # A_sw + [SWITCH] A_sub + A_low = Q_low - U(before the turn), for every decision.
    rng = np.random.default_rng(seed)
    mdp = three_state(4)
    policy = _random_policy(mdp, rng)
    v = evaluate_options(mdp, policy, gamma=float(rng.uniform(0.5, 1.0)))
    s = rng.integers(0, 2, 64)
    gp = rng.integers(-1, 2, 64)
    sw = (rng.random(64) < 0.5) | (gp < 0)
    g = np.where(sw, rng.integers(0, 2, 64), np.maximum(gp, 0))
    a = rng.integers(0, 2, 64)
    k = rng.integers(1, 5, 64)
    total = v.switch_advantage(s, gp, sw, k) + sw * v.subgoal_advantage(s, g, k)
    total = total + v.low_advantage(s, g, a, k)
    np.testing.assert_allclose(total, v.q_low(s, g, a, k) - v.value_before(s, gp, k), atol=1e-12)
    # each decision's exact advantages average to 0 under the policy
    np.testing.assert_allclose(np.einsum("sga,ksga->ksg", policy.action, v.Q_low[1:]), v.low[1:])


def _cell_means_match(keys, est, truth, min_count=50, z=5.0):
    """Per cell of equal keys: |mean(est) - truth| <= z standard errors (+ 1e-9).

    The standard error uses the larger of the cell's sample std and the stream's pooled std of
    est - truth: a cell whose rare outcome was never drawn has a sample std near 0."""
    _, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.ravel()
    pooled = (est - truth).std(ddof=1)
    checked = 0
    for c in range(inv.max() + 1):
        sel = inv == c
        if sel.sum() < min_count:
            continue
        assert np.ptp(truth[sel]) < 1e-9  # the truth is a function of the cell
        se = max(est[sel].std(ddof=1), pooled) / np.sqrt(sel.sum())
        assert abs(est[sel].mean() - truth[sel][0]) <= z * se + 1e-9, (c, sel.sum())
        checked += 1
    assert checked > 0


@settings(max_examples=8, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    lam_turn=st.sampled_from([0.0, 0.5, 1.0]),
    lam_seg=st.sampled_from([0.0, 0.95, 1.0]),
)
def test_hiper_with_exact_critic_is_unbiased(seed, lam_turn, lam_seg):
    # With the exact V_low, V_high, U as critic (unnormalised, env reward only), each of HiPER's
    # streams is an unbiased estimate of its exact counterpart, for any lambda: every TD error
    # after the first has conditional mean 0, and a segment's end is decided before the next
    # turn's action. Checked per decision cell against the mean over many sampled turns.
    rng = np.random.default_rng(seed)
    mdp = three_state(4)
    policy = _random_policy(mdp, rng)
    values = evaluate_options(mdp, policy, gamma=1.0)
    ro = sample_option_groups(mdp, policy, 3000, rng)
    tables = (values.low, values.high, values.term)
    out = credit.compute(
        hiper_step_batch(ro, NAMES, tables),
        "hiper",
        lam_turn=lam_turn,
        lam_seg=lam_seg,
        normalize=False,
        keep_penalty=0.0,
    )
    tru = truths(values, ro)
    k, s = ro.steps_left, ro.state
    low = np.stack([k, s, ro.goal, ro.action], axis=1)
    _cell_means_match(low, out.components["action"], tru["A_low"])
    start = ro.switch
    sub = np.stack([k, s, ro.goal], axis=1)[start]
    _cell_means_match(sub, out.components["subgoal"][start], tru["A_sub"][start])
    dec = ro.t > 0
    sw = np.stack([k, s, ro.prev_goal, ro.switch], axis=1)[dec]
    _cell_means_match(sw, out.components["switch"][dec], tru["A_sw"][dec])


def test_paper_switch_form_equals_the_truth_with_exact_values():
    mdp = three_state(4)
    policy = toy_policy()
    values = evaluate_options(mdp, policy)
    ro = sample_option_groups(mdp, policy, 20, np.random.default_rng(2))
    tables = (values.low, values.high, values.term)
    np.testing.assert_allclose(
        paper_switch_advantage(tables, policy, ro), truths(values, ro)["A_sw"], atol=1e-12
    )


def test_zero_critic_is_biased():
    # The same check fails without a critic (the test above can fail): A_low is then the segment
    # return, whose mean is Q_low's segment part, not the advantage.
    rng = np.random.default_rng(0)
    mdp = three_state(4)
    policy = toy_policy()
    values = evaluate_options(mdp, policy)
    ro = sample_option_groups(mdp, policy, 3000, rng)
    zero = tuple(np.zeros_like(t) for t in (values.low, values.high, values.term))
    out = credit.compute(
        hiper_step_batch(ro, NAMES, zero), "hiper", normalize=False, keep_penalty=0.0
    )
    low = np.stack([ro.steps_left, ro.state, ro.goal, ro.action], axis=1)
    with pytest.raises(AssertionError):
        _cell_means_match(low, out.components["action"], truths(values, ro)["A_low"])


def test_sampler_decisions():
    mdp = three_state(4)
    ro = sample_option_groups(mdp, toy_policy(), 50, np.random.default_rng(1))
    assert (ro.switch[ro.t == 0]).all() and (ro.prev_goal[ro.t == 0] == -1).all()
    keep = ~ro.switch
    np.testing.assert_array_equal(ro.goal[keep], ro.prev_goal[keep])
    # the previous turn's subgoal is carried: prev_goal(t) = goal(t - 1) in the same rollout
    later = np.flatnonzero(ro.t > 0)
    np.testing.assert_array_equal(ro.prev_goal[later], ro.goal[later - 1])


def test_pickplace_subgoals_and_policy():
    task = make_task(np.random.default_rng(3), 3)
    mdp = pickplace_mdp(task, 15)
    sg = pickplace_subgoals(task, mdp)
    assert sg.target.shape == (4, mdp.num_states) and not sg.target[:, 0].any()  # none at start
    d = distance_to_subgoal(mdp, sg)
    assert np.isfinite(d[:, 0]).all() and d[3, 0] > d[1, 0]  # winning needs the object first
    policy = option_policy(mdp, sg, np.random.default_rng(0))
    v = evaluate_options(mdp, policy)
    assert 0.0 < v.high[15, 0] < 10.0


def test_hiper_lab_quick_run():
    cfg = HiperConfig(group_sizes=(4,), tasks_per_batch=3, seeds=2)
    records, context = run_hiper_fidelity(cfg)
    labels = {(r["label"], r["truth"]) for r in records}
    assert ("hiper[exact] action", "A_low") in labels and ("grpo", "A_low") in labels
    assert ("hiper[exact,lam_seg=0] subgoal", "A_sub") in labels
    exact = [r["pearson"] for r in records if r["label"] == "hiper[exact] action"]
    assert np.all(np.isfinite(exact))
    text = render_hiper(records, context, cfg)
    assert "| hiper[zero] switch | A_sw |" in text
