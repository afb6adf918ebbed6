"""Wilson interval: hand-computed values and invariants."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrl.evaluation import wilson_interval
from agentrl.evaluation.stats import z_value


def test_z_value_95():
    assert z_value(0.95) == pytest.approx(1.959963984540054, abs=1e-12)


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        # z = 1.959964, z²/n = 0.384146 at n = 10: centre (0.5 + 0.192073) / 1.384146 = 0.5,
        # half = z / 1.384146 * sqrt(0.025 + 0.0096037) = 0.263407.
        (5, 10, 0.236593, 0.763407),
        # 0 successes: high = (z²/n) / (1 + z²/n) = 0.384146 / 1.384146.
        (0, 10, 0.0, 0.277533),
        (10, 10, 0.722467, 1.0),
        # 1 of 4: z²/n = 0.960365, centre (0.25 + 0.480182) / 1.960365 = 0.372473,
        # half = z / 1.960365 * sqrt(0.046875 + 0.060023) = 0.999795 * 0.326953 = 0.326886.
        (1, 4, 0.045587, 0.699358),
    ],
)
def test_hand_computed(k, n, low, high):
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(low, abs=2e-6)
    assert hi == pytest.approx(high, abs=2e-6)


def test_no_trials_is_uninformative():
    assert wilson_interval(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize(("k", "n"), [(-1, 3), (4, 3), (0, -1)])
def test_bad_counts(k, n):
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(k, n)


@pytest.mark.parametrize("conf", [0.0, 1.0, 1.5, -0.1])
def test_bad_confidence(conf):
    with pytest.raises(ValueError, match="confidence"):
        wilson_interval(1, 2, conf)


counts = st.integers(1, 10_000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n)))


@given(counts)
def test_contains_estimate_and_stays_in_unit_interval(kn):
    k, n = kn
    lo, hi = wilson_interval(k, n)
    assert 0.0 <= lo <= k / n <= hi <= 1.0
    assert lo < hi


@given(counts)
def test_symmetric_in_failures(kn):
    k, n = kn
    lo, hi = wilson_interval(k, n)
    flo, fhi = wilson_interval(n - k, n)
    assert math.isclose(lo, 1 - fhi, abs_tol=1e-12)
    assert math.isclose(hi, 1 - flo, abs_tol=1e-12)


@given(counts, st.sampled_from([0.5, 0.8, 0.9]))
def test_higher_confidence_is_wider(kn, conf):
    k, n = kn
    lo, hi = wilson_interval(k, n, conf)
    lo95, hi95 = wilson_interval(k, n, 0.95)
    assert lo95 <= lo and hi <= hi95


@given(st.integers(1, 200), st.integers(0, 4))
def test_more_data_is_narrower(m, j):
    """Same rate j/4 measured on 4m and on 16m episodes: the larger sample is narrower."""
    lo, hi = wilson_interval(j * m, 4 * m)
    lo4, hi4 = wilson_interval(4 * j * m, 16 * m)
    assert hi4 - lo4 < hi - lo
