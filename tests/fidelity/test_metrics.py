"""Agreement metrics and bootstrap intervals against hand-computed values."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.fidelity.metrics import agreement, bootstrap_ci, pearson, rankdata, spearman


def test_rankdata_averages_ties():
    np.testing.assert_allclose(rankdata(np.array([10.0, 20.0, 10.0, 30.0])), [1.5, 3.0, 1.5, 4.0])


def test_pearson_and_spearman_by_hand():
    x = np.array([1.0, 2.0, 3.0])
    assert pearson(x, np.array([2.0, 4.0, 6.0])) == 1.0
    assert np.isnan(pearson(x, np.zeros(3)))
    # Ranks (1, 2, 3) vs (1, 3, 2): Pearson of ranks = 0.5.
    assert spearman(x, np.array([1.0, 9.0, 4.0])) == 0.5
    # Monotone transforms keep Spearman at 1.
    assert spearman(x, np.exp(x)) == 1.0


def test_agreement_by_hand():
    est = np.array([0.5, -1.0, 0.0, 2.0, 1e-9])
    tru = np.array([1.0, 1.0, -1.0, 0.0, -2.0])
    m = agreement(est, tru)
    # Steps with true advantage != 0: rows 0, 1, 2, 4 -> signs agree only at row 0.
    assert m["sign"] == 0.25
    # Zero estimates: rows 2 and 4 (|1e-9| is below the tolerance).
    assert m["zero"] == 0.4


def test_bootstrap_interval_is_seeded_and_contains_the_mean():
    v = np.array([0.1, 0.3, 0.2, 0.5, np.nan])
    a = bootstrap_ci(v, np.random.default_rng(0))
    b = bootstrap_ci(v, np.random.default_rng(0))
    assert a == b
    assert a[1] <= a[0] <= a[2] and a[0] == np.mean([0.1, 0.3, 0.2, 0.5])
    assert bootstrap_ci(np.array([0.7]), np.random.default_rng(0)) == (0.7, 0.7, 0.7)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-100, 100), min_size=3, max_size=30), st.integers(0, 1000))
def test_correlations_are_bounded_and_symmetric(xs, seed):
    x = np.array(xs)
    y = x + np.random.default_rng(seed).normal(size=len(x))
    for f in (pearson, spearman):
        r = f(x, y)
        if np.isfinite(r):
            assert -1 - 1e-9 <= r <= 1 + 1e-9
            assert np.isclose(r, f(y, x))
