"""Dynamic sampling (DAPO / GiGPO filter): which groups are kept, what is drawn, the budget."""

from __future__ import annotations

import itertools

import pytest

from agentrl.dynamic_sampling import is_informative, sample_informative


def stream(pattern):
    """draw(k) hands out groups from ``pattern`` (True: informative) with running ids."""
    it = itertools.cycle(pattern)
    ids = itertools.count()
    calls = []

    def draw(k):
        calls.append(k)
        return [(next(ids), next(it)) for _ in range(k)]

    return draw, calls


def returns(g):
    return [0.0, 1.0] if g[1] else [1.0, 1.0]


def test_is_informative():
    assert is_informative([0, 1]) and not is_informative([3, 3, 3]) and not is_informative([5])
    assert not is_informative([1.0, 1.0 + 1e-12])


def test_all_informative_draws_once():
    draw, calls = stream([True])
    r = sample_informative(draw, returns, 4, group_size=2, max_extra_rollouts=100)
    assert calls == [4] and [g[0] for g in r.groups] == [0, 1, 2, 3]
    assert r.metrics["dynamic_sampling/dropped_groups"] == 0
    assert r.metrics["dynamic_sampling/extra_rollouts"] == 0


def test_refills_from_the_keep_rate():
    # half informative: first round keeps 2 of 4; rate 0.5 -> draws ceil(2 / 0.5) = 4 more
    draw, calls = stream([True, False])
    r = sample_informative(draw, returns, 4, group_size=2, max_extra_rollouts=100)
    assert calls == [4, 4]
    assert [g[0] for g in r.groups] == [0, 2, 4, 6] and all(g[1] for g in r.groups)
    m = r.metrics
    assert m["dynamic_sampling/dropped_groups"] == 4 and m["dynamic_sampling/extra_groups"] == 4
    assert m["dynamic_sampling/extra_rollouts"] == 8 and m["dynamic_sampling/short"] == 0


def test_budget_caps_the_extra_rollouts_and_pads():
    # nothing informative: one extra round of at most 6 // 2 = 3 groups, then pad with dropped ones
    draw, calls = stream([False])
    r = sample_informative(draw, returns, 4, group_size=2, max_extra_rollouts=6)
    assert calls == [4, 3] and len(r.groups) == 4
    assert r.metrics["dynamic_sampling/short"] == 4
    assert r.metrics["dynamic_sampling/extra_rollouts"] == 6
    keep = sample_informative(
        stream([False])[0], returns, 4, group_size=2, max_extra_rollouts=0, when_short="keep"
    )
    assert keep.groups == [] and keep.metrics["dynamic_sampling/rounds"] == 1


def test_bad_arguments():
    draw, _ = stream([True])
    with pytest.raises(ValueError, match="when_short"):
        sample_informative(draw, returns, 1, group_size=1, max_extra_rollouts=0, when_short="x")
    with pytest.raises(ValueError, match="max_extra_rollouts"):
        sample_informative(draw, returns, 1, group_size=1, max_extra_rollouts=-1)
