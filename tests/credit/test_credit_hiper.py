"""HiPER's HAE (credit=hiper): hand-computed cases from the paper's equations, and properties.

Parity with the authors' code on random batches is checked by ``scripts/hiper_parity.py`` (it
needs their checkout); the figures are in docs/credit.md.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from agentrl.credit import StepBatch, StepBatchError, compute
from agentrl.credit.hiper import hiper
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def run(b: StepBatch, **opts):
    """HAE with the registry's guard rails (it is registered by credit/__init__ once wired)."""
    r = hiper(b, **opts)
    assert r.advantages.shape == (len(b),)
    assert all(np.isfinite(v).all() for v in r.components.values())
    return r


RAW = dict(normalize=False, keep_penalty=0.0, keep_consistency_penalty=0.0, invalid_penalty=0.0)


def two_trajectories(**extras) -> StepBatch:
    # traj 0: 4 turns, SWITCH at t=2 -> segments {0,1}, {2,3}; reward 1 at the end (done)
    # traj 1: 2 turns, SWITCH at t=1 -> segments {0}, {1}; no reward (done)
    b = StepBatch.from_trajectories(
        [
            dict(group=0, rewards=[0, 0, 0, 1], states=list("abcd"), values=[0.1, 0.2, 0.3, 0.4]),
            dict(group=0, rewards=[0, 0], states=list("ab"), values=[0.5, 0.6]),
        ]
    )
    cols = {
        "switch": np.array([1, 0, 1, 0, 0, 1], bool),
        "value_high": np.array([1.0, 1.1, 1.2, 1.3, 1.4, 1.5]),
        "value_term": np.full(6, 0.5),
    }
    cols.update(extras)
    return dataclasses.replace(b, extras=cols)


def test_hand_computed_gamma_one():
    # gamma = lam_turn = 1, lam_seg = 0.95.
    # low, traj 0: seg {2,3}: t3 done: 1 - .4 = .6; t2: 0 + .4 - .3 = .1 -> .1 + .6 = .7
    #              seg {0,1}: t1 ends, bootstraps to V_high(t2) = 1.2: 1.2 - .2 = 1.0; t0: .1 + 1.0
    # low, traj 1: t1 done: -.6; t0 ends, bootstraps to V_high(t1) = 1.5: 1.5 - .5 = 1.0
    # high, traj 0: seg1: 1 - 1.2 = -.2; seg0: (0 + 0 + 1.2) - 1.0 = .2 + .95 * -.2 = .01
    # high, traj 1: seg1: 0 - 1.5 = -1.5; seg0: 1.5 - 1.4 = .1 + .95 * -1.5 = -1.325
    # term: return to the segment end plus the boundary value, minus V_term = .5
    r = run(two_trajectories(), **RAW)
    c = r.components
    np.testing.assert_allclose(c["action"], [1.1, 1.0, 0.7, 0.6, 1.0, -0.6], atol=1e-12)
    np.testing.assert_allclose(c["subgoal"], [0.01, 0, -0.2, 0, -1.325, -1.5], atol=1e-12)
    np.testing.assert_allclose(c["switch"], [0.7, 0.7, 0.5, 0.5, 1.0, -0.5], atol=1e-12)
    np.testing.assert_allclose(c["returns_high"], [1.01, 0, 1.0, 0, 0.075, 0], atol=1e-12)
    np.testing.assert_allclose(c["returns_low"], c["action"] + [0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    np.testing.assert_allclose(r.advantages, c["action"], rtol=1e-6)
    assert r.diagnostics["segments_per_trajectory"] == 2.0


def test_hand_computed_discounted_smdp():
    # gamma 0.5, lam_turn 0.5, lam_seg 1, traj 0 only (segments {0,1}, {2,3})
    # seg1: G = 0 + .5 * 1 = .5 -> .5 - 1.2 = -.7
    # seg0: G = 0 + 0 + .5^2 * V_high(t2) = .3 -> .3 - 1.0 = -.7; + .5^2 * 1 * -.7 = -.875
    # low t1: 0 + .5 * 1.2 - .2 = .4; t0: 0 + .5 * .2 - .1 = 0 -> 0 + .25 * .4 = .1
    b = two_trajectories()
    b = b.take(np.flatnonzero(b.traj == 0))
    r = run(b, gamma=0.5, lam_turn=0.5, lam_seg=1.0, **RAW)
    np.testing.assert_allclose(r.components["subgoal"], [-0.875, 0, -0.7, 0], atol=1e-12)
    np.testing.assert_allclose(r.components["action"][:2], [0.1, 0.4], atol=1e-12)


def test_reward_shaping_terms():
    # traj 0 switches (t0, t2) and keeps (t1, t3): normalized keep penalty -0.3 / 4 on t1 and t3;
    # the subgoal changes on the KEEP turn t3 -> consistency penalty -0.3; t1 keeps it -> none.
    # traj 1: t0 KEEP (-0.3 / 2), t1 SWITCH; the second turn is invalid -> -0.1.
    sub = np.array(["x", "x", "y", "z", "p", "q"], dtype=object)
    b = two_trajectories(subgoal=sub)
    b = dataclasses.replace(b, valid=np.array([1, 1, 1, 1, 1, 0], bool))
    r = run(b, normalize=False)
    np.testing.assert_allclose(
        r.components["shaped_reward"], [0, -0.075, 0, 1 - 0.075 - 0.3, -0.15, -0.1], atol=1e-12
    )
    fixed = run(b, normalize=False, keep_penalty_mode="fixed")
    np.testing.assert_allclose(
        fixed.components["shaped_reward"], [0, -0.3, 0, 1 - 0.6, -0.3, -0.1], atol=1e-12
    )


def test_consistency_requires_both_subgoals():
    # t3 keeps but wrote no subgoal: skipped when both are required, penalised otherwise
    sub = np.array(["x", "x", "y", None, "p", "q"], dtype=object)
    b = two_trajectories(subgoal=sub)
    opts = dict(normalize=False, keep_penalty=0.0, invalid_penalty=0.0)
    both = run(b, **opts).components["shaped_reward"]
    either = run(b, consistency_requires_both=False, **opts)
    assert both[3] == 1.0 and either.components["shaped_reward"][3] == pytest.approx(0.7)


def test_normalisation_sets():
    # high advantages are standardised over segment starts that wrote a subgoal only
    sub = np.array(["x", "x", None, "y", "p", "q"], dtype=object)
    r = run(two_trajectories(subgoal=sub), **{**RAW, "normalize": True})
    raw = run(two_trajectories(subgoal=sub), **RAW).components["subgoal"]
    sel = raw[[0, 4, 5]]
    want = (raw[[0, 4, 5]] - sel.mean()) / (sel.std() + 1e-8)
    np.testing.assert_allclose(r.components["subgoal"][[0, 4, 5]], want, rtol=1e-9)
    assert r.components["subgoal"][1] == 0 and r.components["subgoal"][3] == 0
    a = r.components["action"]
    assert abs(a.mean()) < 1e-9 and abs(a.std() - 1) < 1e-6


def test_truncated_bootstrap():
    # one trajectory cut after 2 turns (not done), one segment: bootstrap with its own values
    b = StepBatch(
        group=[0, 0],
        traj=[0, 0],
        t=[0, 1],
        reward=[0.0, 0.0],
        done=[False, False],
        state_key=["a", "b"],
        action_key=["x", "x"],
        valid=[True, True],
        value=[0.2, 0.4],
        extras={"switch": np.array([False, False]), "value_high": np.array([2.0, 9.0])},
    )
    on = run(b, **RAW).components
    off = run(b, bootstrap_truncated=False, **RAW).components
    # low: t1: 0 + V_low(t1) - V_low(t1) = 0; t0: .4 - .2 = .2.  high: V_high(start) - V_high = 0
    np.testing.assert_allclose(on["action"], [0.2, 0.0], atol=1e-12)
    assert on["subgoal"][0] == pytest.approx(0.0)
    np.testing.assert_allclose(off["action"], [0.2 - 0.4, -0.4], atol=1e-12)
    assert off["subgoal"][0] == pytest.approx(-2.0)
    assert (on["switch"] == 0).all()  # no value_term column: no termination term


def test_missing_columns_are_named():
    b = StepBatch.from_trajectories([dict(group=0, rewards=[1], states=["a"], values=[0.0])])
    with pytest.raises(StepBatchError, match="'switch'.*hiper"):
        run(b)
    b = dataclasses.replace(b, extras={"switch": np.array([True])})
    run(b, keep_consistency_penalty=0.0)
    b2 = StepBatch.from_trajectories([dict(group=0, rewards=[1, 0], states=["a", "b"])])
    b2 = dataclasses.replace(b2, value=np.zeros(2), extras={"switch": np.array([True, False])})
    with pytest.raises(StepBatchError, match="'subgoal'"):
        run(b2)
    with pytest.raises(ValueError, match="keep_penalty_mode"):
        run(b, keep_penalty_mode="sometimes")


# -- properties -----------------------------------------------------------------------------


@st.composite
def hiper_batches(draw):
    rows: dict[str, list] = {
        k: [] for k in ("group", "traj", "t", "r", "valid", "sw", "v", "vh", "vt", "sg", "done")
    }
    traj = 0
    for g in range(draw(st.integers(1, 3))):
        for _ in range(draw(st.integers(1, 3))):
            T = draw(st.sampled_from([1, 2, 3, 6]))
            cut = draw(st.booleans())
            for t in range(T):
                rows["group"].append(g)
                rows["traj"].append(traj)
                rows["t"].append(t)
                rows["r"].append(draw(st.floats(-1e6, 1e6)))
                rows["valid"].append(draw(st.booleans()))
                rows["sw"].append(draw(st.booleans()))
                rows["v"].append(draw(st.floats(-1e6, 1e6)))
                rows["vh"].append(draw(st.floats(-1e6, 1e6)))
                rows["vt"].append(draw(st.floats(-1e6, 1e6)))
                rows["sg"].append(draw(st.sampled_from([None, "a", "b"])))
                rows["done"].append(t == T - 1 and not cut)
            traj += 1
    n = len(rows["t"])
    return StepBatch(
        group=rows["group"],
        traj=rows["traj"],
        t=rows["t"],
        reward=rows["r"],
        done=rows["done"],
        state_key=np.zeros(n, dtype=np.int64),
        action_key=np.zeros(n, dtype=np.int64),
        valid=rows["valid"],
        value=rows["v"],
        extras={
            "switch": np.array(rows["sw"]),
            "value_high": np.array(rows["vh"]),
            "value_term": np.array(rows["vt"]),
            "subgoal": np.array(rows["sg"], dtype=object),
        },
    )


SETTINGS = dict(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(**SETTINGS)
@given(b=hiper_batches(), normalize=st.booleans())
def test_finite(b, normalize):
    r = run(b, normalize=normalize)
    for v in r.components.values():
        assert np.isfinite(v).all()


@settings(**SETTINGS)
@given(b=hiper_batches(), data=st.data())
def test_row_order_independent(b, data):
    perm = np.array(data.draw(st.permutations(range(len(b)))))
    r1 = run(b)
    r2 = run(b.take(perm))
    for k in ("action", "subgoal", "switch", "returns_high"):
        np.testing.assert_allclose(r2.components[k], r1.components[k][perm], rtol=1e-9, atol=1e-6)


@settings(**SETTINGS)
@given(b=hiper_batches(), gamma=st.sampled_from([1.0, 0.9]), lam=st.sampled_from([1.0, 0.8]))
def test_all_keep_low_level_is_turn_gae(b, gamma, lam):
    # one segment per trajectory: the low level is plain turn GAE on the same values
    b = dataclasses.replace(b, extras={**b.extras, "switch": np.zeros(len(b), bool)})
    r = run(b, gamma=gamma, lam_turn=lam, bootstrap_truncated=False, **RAW)
    g = compute(b, "gae", gamma=gamma, lam=lam)
    np.testing.assert_allclose(r.components["action"], g.advantages, rtol=1e-5, atol=1e-3)


@settings(**SETTINGS)
@given(b=hiper_batches(), gamma=st.sampled_from([1.0, 0.9]), lam=st.sampled_from([0.95, 0.5]))
def test_all_switch_high_level_is_gae_on_high_values(b, gamma, lam):
    # one-turn segments: the high level is turn GAE over V_high with lam_seg
    b = dataclasses.replace(b, extras={**b.extras, "switch": np.ones(len(b), bool)})
    r = run(b, gamma=gamma, lam_seg=lam, bootstrap_truncated=False, **RAW)
    bh = dataclasses.replace(b, value=b.extras["value_high"])
    g = compute(bh, "gae", gamma=gamma, lam=lam)
    np.testing.assert_allclose(r.components["subgoal"], g.advantages, rtol=1e-5, atol=1e-3)


def test_zero_rewards_and_values_give_zero():
    b = two_trajectories(value_high=np.zeros(6), value_term=np.zeros(6))
    b = dataclasses.replace(b, reward=np.zeros(6), value=np.zeros(6))
    r = run(b, **RAW)
    for k in ("action", "subgoal", "switch"):
        assert (r.components[k] == 0).all()
