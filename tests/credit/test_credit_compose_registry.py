"""Composition from plain config, the registry's guard rails, diagnostics."""

from __future__ import annotations

import numpy as np
import pytest
from agentrl.credit import StepBatch, compute
from agentrl.credit.synthetic import random_batch

from agentrl import credit

ALL = [
    "bipace",
    "compose",
    "gae",
    "gagpo",
    "gigpo",
    "graphgpo",
    "grpo",
    "hgpo",
    "hiper",
    "mars",
    "milestone",
    "rloo",
    "salt",
    "turn",
]


@pytest.fixture(scope="module")
def batch():
    return random_batch(n_groups=6, group_size=4, max_len=12, n_states=8, embedding_dim=8, seed=3)


def test_every_module_is_registered_with_options():
    assert credit.available() == ALL
    assert credit.options("gigpo")["gamma"] == 0.95
    assert credit.options("gigpo")["mode"] == "mean_std"
    assert credit.options("milestone")["mode"] == "mean"


def test_compose_equals_the_sum_of_its_parts(batch):
    spec = dict(
        base={"name": "grpo", "mode": "mean"},
        terms=[
            {"name": "gigpo", "weight": 0.5, "mode": "mean"},
            {"name": "milestone", "weight": 2.0},
        ],
    )
    r = compute(batch, "compose", **spec)
    base = compute(batch, "grpo", mode="mean").advantages.astype(np.float64)
    gi = compute(batch, "gigpo", mode="mean").components["step"]
    ms = compute(batch, "milestone").components["step"]
    np.testing.assert_allclose(r.advantages, base + 0.5 * gi + 2.0 * ms, rtol=1e-5, atol=1e-5)
    assert "term0:gigpo/step_singleton_fraction" in r.diagnostics
    assert "base/episode_group_sizes" in r.diagnostics


def test_compose_from_a_hydra_config(batch):
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(
        {"name": "compose", "base": {"name": "rloo"}, "terms": [{"name": "hgpo", "alpha": 2.0}]}
    )
    opts = {k: v for k, v in cfg.items() if k != "name"}
    r = compute(batch, cfg.name, **opts)
    exp = compute(batch, "rloo").advantages + compute(batch, "hgpo", alpha=2.0).components["step"]
    np.testing.assert_allclose(r.advantages, exp, rtol=1e-5, atol=1e-5)


def test_compose_nested_and_without_base(batch):
    inner = {"name": "compose", "base": "grpo", "terms": ["gigpo"]}
    r = compute(batch, "compose", base=inner, terms=[])
    np.testing.assert_allclose(
        r.advantages, compute(batch, "compose", base="grpo", terms=["gigpo"]).advantages
    )
    r = compute(batch, "compose", base=None, terms=[{"name": "gigpo", "component": "step"}])
    np.testing.assert_allclose(r.advantages, compute(batch, "gigpo").components["step"], rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        (dict(base={"mode": "mean"}), ValueError, ["'name'"]),
        (dict(base="nope"), KeyError, ["'nope'", "gigpo", "grpo"]),
        (
            dict(terms=[{"name": "gigpo", "component": "nope"}]),
            ValueError,
            ["'nope'", "episode", "step"],
        ),
        (dict(terms={"name": "gigpo"}), TypeError, ["list"]),
        (dict(terms=[{"name": "gigpo", "gama": 0.9}]), TypeError, ["'gama'", "gamma"]),
    ],
)
def test_compose_errors(batch, kwargs, exc, words):
    with pytest.raises(exc) as err:
        compute(batch, "compose", **kwargs)
    for w in words:
        assert w in str(err.value)


def test_unknown_module_and_option_list_the_valid_ones(batch):
    with pytest.raises(KeyError) as err:
        compute(batch, "gigpoo")
    assert all(name in str(err.value) for name in ALL)
    with pytest.raises(TypeError) as err:
        compute(batch, "gigpo", gama=0.9)
    assert "'gama'" in str(err.value) and "gamma" in str(err.value) and "omega" in str(err.value)


@pytest.mark.parametrize(
    "name, opts, words",
    [
        ("gigpo", dict(mode="z"), ["'mode'", "'mean'", "'mean_std'"]),
        ("grpo", dict(stats="rows"), ["'stats'", "'per_trajectory'"]),
        ("salt", dict(node="edge"), ["'node'", "'state_action'"]),
        ("turn", dict(variant="gtpo"), ["'variant'", "'mt_grpo'"]),
        ("graphgpo", dict(omega=1.5), ["'omega'"]),
        ("hgpo", dict(history_length=-1), ["'history_length'"]),
        ("gae", dict(lam=2.0), ["'lam'"]),
    ],
)
def test_bad_option_values(batch, name, opts, words):
    with pytest.raises(ValueError) as err:
        compute(batch, name, **opts)
    for w in words:
        assert w in str(err.value)


def test_compute_needs_a_step_batch():
    with pytest.raises(TypeError, match="StepBatch"):
        compute({"reward": [1.0]}, "grpo")


def test_overflowing_rewards_give_a_clear_error():
    b = StepBatch.from_trajectories(
        [
            dict(group=0, rewards=[1e308, 1e308], states=["a", "b"]),
            dict(group=0, rewards=[0.0, 0.0], states=["a", "b"]),
        ]
    )
    with pytest.raises(ValueError, match=r"episode returns overflow.*rows \[0, 1\].*rescale"):
        compute(b, "grpo", mode="mean")
    # advantages that do not fit float32 are an error too, not inf
    b = StepBatch.from_trajectories(
        [dict(group=0, rewards=[1e300], states=["a"]), dict(group=0, rewards=[0.0], states=["a"])]
    )
    with pytest.raises(FloatingPointError, match="float32.*rescale"):
        compute(b, "grpo", mode="mean")


def test_diagnostics_all_fail_variance():
    # group 0: both rollouts fail; returns -0.2 and -0.4 (a dense step cost): population var = 0.01
    # group 1: one success; not an all-fail group
    b = StepBatch.from_trajectories(
        [
            dict(group=0, rewards=[-0.1, -0.1], states=["a", "b"], success=False),
            dict(
                group=0,
                rewards=[-0.1, -0.1, -0.1, -0.1],
                states=["a", "c", "d", "e"],
                success=False,
            ),
            dict(group=1, rewards=[1.0], states=["x"], success=True),
            dict(group=1, rewards=[0.0], states=["x"], success=False),
        ]
    )
    d = compute(b, "gigpo", gamma=1.0).diagnostics
    assert d["all_fail_group_fraction"] == 0.5
    assert d["episode_all_fail_var"] == pytest.approx(0.01)
    # step groups in the all-fail group: only "a" has two members, G = {-0.2, -0.4}: var 0.01
    assert d["step_all_fail_var"] == pytest.approx(0.01)
    assert d["episode_group_sizes"] == {2: 2}
    assert 0 <= d["zero_advantage_fraction"] <= 1


def test_needs_are_declared_at_registration():
    """What each module reads beyond the core columns, as its registration declares it."""
    from agentrl import credit

    assert credit.needs("grpo") == frozenset()
    assert credit.needs("gae") == {"value"}
    assert credit.needs("bipace") == {"embedding"}
    assert credit.needs("graphgpo") == {"next_state_key"}
    assert credit.needs("gigpo") == frozenset()
    assert credit.needs("gigpo", similarity=0.9) == {"observation"}
    assert credit.needs("gigpo", similarity=0.9, similarity_key="text") == {"text"}
    assert credit.needs("turn") == frozenset()
    assert credit.needs("turn", variant="mt_grpo") == {"turn_reward"}
    assert credit.needs("turn", signal_key="progress") == {"progress"}
    # compose: the union of its parts
    spec = {"base": "gae", "terms": [{"name": "bipace", "weight": 0.5}, "grpo"]}
    assert credit.needs("compose", **spec) == {"value", "embedding"}
    assert credit.needs("compose", base=None, terms=[]) == frozenset()
    with pytest.raises(KeyError, match="unknown credit module"):
        credit.needs("nope")
