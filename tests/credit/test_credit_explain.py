"""step_groups: the groups and baselines it reports are the ones each module's advantage used."""

from __future__ import annotations

import numpy as np
import pytest
from agentrl.credit import compute, step_groups
from agentrl.credit.synthetic import random_batch


@pytest.fixture(scope="module")
def batch():
    return random_batch(n_groups=6, group_size=5, max_len=12, n_states=8, seed=3)


def test_gigpo_step_term_is_the_return_minus_the_anchor_baseline(batch):
    opts = dict(gamma=0.9, mode="mean", invalid_penalty=0.1)
    res = compute(batch, "gigpo", **opts)
    g = step_groups(batch, "gigpo", **opts)
    many = g["anchor_size"] > 1
    assert many.any() and (~many).any()
    np.testing.assert_allclose(
        res.components["step"][many], (g["step_return"] - g["anchor_baseline"])[many], atol=1e-9
    )
    assert (res.components["step"][~many] == 0).all()
    # an anchor group: one task group, one state; its size is its number of rows
    for code in np.unique(g["anchor_group"])[:20]:
        rows = g["anchor_group"] == code
        assert len(set(batch.group[rows])) == 1 and len(set(batch.state_key[rows])) == 1
        assert (g["anchor_size"][rows] == rows.sum()).all()
    # episode term (per step rows, mean mode): the row's score minus the baseline reported
    score = g["episode_return"] - 0.1 * ~batch.valid
    np.testing.assert_allclose(res.components["episode"], score - g["episode_baseline"], atol=1e-9)


@pytest.mark.parametrize("stats", ["per_trajectory", "per_step_rows"])
def test_rloo_and_grpo_baselines(batch, stats):
    rloo = compute(batch, "rloo", stats=stats).advantages
    g = step_groups(batch, "rloo", stats=stats)
    score = g["episode_return"]
    np.testing.assert_allclose(rloo, score - g["episode_baseline"], rtol=1e-5, atol=1e-5)
    grpo = compute(batch, "grpo", stats=stats, mode="mean").advantages
    g = step_groups(batch, "grpo", stats=stats, mode="mean")
    np.testing.assert_allclose(grpo, score - g["episode_baseline"], rtol=1e-5, atol=1e-5)
    assert (g["episode_group_size"] == 5).all()


def test_hgpo_levels_match_the_modules_components(batch):
    res = compute(batch, "hgpo", history_length=2)
    g = step_groups(batch, "hgpo", history_length=2)
    for k in (1, 2, 3):
        codes, size = g[f"history_k{k}_group"], g[f"history_k{k}_size"]
        assert ((codes >= 0) == (batch.t >= k - 1)).all()
        # a level's advantage is 0 for a step alone in its group at that level
        assert (res.components[f"k{k}"][size <= 1] == 0).all()
    np.testing.assert_array_equal(g["history_k1_group"], batch.anchor_index)


def test_compose_reports_its_parts_and_other_modules_the_episode(batch):
    g = step_groups(batch, "compose", base="rloo", terms=[{"name": "gigpo", "weight": 0.5}])
    assert {"anchor_group", "episode_baseline"} <= set(g)
    assert set(step_groups(batch, "turn")) == {
        "episode_group", "episode_group_size", "episode_return", "episode_mean_return"
    }  # fmt: skip
    assert "episode_baseline" in step_groups(batch, "hgpo", base_group=True)
    assert "episode_baseline" not in step_groups(batch, "hgpo")
