"""The harness runs registered modules on sampled batches and reports what it cannot run."""

import numpy as np
import pytest
from agentrl.credit import CreditResult, StepBatch
from agentrl.credit import registry as credit_registry

from agentrl import credit
from agentrl.fidelity.mdp import stack
from agentrl.fidelity.modules import (
    LEFT_OUT,
    Inputs,
    ModuleSpec,
    default_specs,
    module_gamma,
    parse_module_spec,
    run_module_spec,
    state_embedding,
)
from agentrl.fidelity.policies import uniform_policy
from agentrl.fidelity.sampler import sample_groups, to_step_batch
from agentrl.fidelity.sokoban import sokoban_tasks

from .toy import three_state


def _inputs(n=8):
    mdp = stack(sokoban_tasks([1, 2, 5, 9]))
    pi = uniform_policy(mdp)
    r = sample_groups(mdp, pi, n, np.random.default_rng(0))
    return Inputs(mdp, pi, r, state_embedding(mdp.num_states, np.random.default_rng(1)))


def test_every_registered_module_is_measured():
    labels = [s.label for s in default_specs()]
    assert labels == [m for m in credit.available() if m not in LEFT_OUT]
    inputs = _inputs()
    for spec in default_specs():
        adv, status = run_module_spec(spec, inputs)
        assert status == "ok", (spec.label, status)
        assert adv.shape == (len(inputs.rollouts),) and np.isfinite(adv).all()


def test_grpo_through_the_harness_equals_credit_compute():
    inputs = _inputs()
    adv, _ = run_module_spec(parse_module_spec("grpo:mode=mean"), inputs)
    ref = credit.compute(to_step_batch(inputs.rollouts), "grpo", mode="mean").advantages
    np.testing.assert_allclose(adv, ref)


def test_reference_estimators_by_hand():
    # Three-state MDP, uniform policy, horizon 2: from A, V2(A) = 1.75 and V1(B) = 5 (test_dp).
    mdp = three_state(2)
    pi = uniform_policy(mdp)
    r = sample_groups(mdp, pi, 50, np.random.default_rng(3))
    inputs = Inputs(mdp, pi, r, np.eye(3))
    mc, status = run_module_spec(parse_module_spec("ref:mc-minus-true-V"), inputs)
    assert status == "ok"
    G = r.discounted_returns(1.0)
    V = np.where(r.t == 0, np.where(r.state == 0, 1.75, 4.75), np.where(r.state == 0, -0.5, 5.0))
    np.testing.assert_allclose(mc, G - V)
    true, _ = run_module_spec(parse_module_spec("ref:true-advantage"), inputs)
    np.testing.assert_allclose(true, inputs.true_advantage(1.0))


def test_one_step_gae_with_the_true_critic_is_the_true_advantage():
    """End-to-end check of the harness: with the exact V^pi as critic, lam = 0 and gamma = 1,
    GAE's delta r_t + V_{k-1}(s_{t+1}) - V_k(s_t) is Q - V in a deterministic env."""
    if "gae" not in credit.available():
        pytest.fail("the gae credit module is not registered")
    inputs = _inputs()
    adv, status = run_module_spec(parse_module_spec("gae:lam=0.0,gamma=1.0"), inputs)
    assert status == "ok"
    np.testing.assert_allclose(adv, inputs.true_advantage(1.0), atol=1e-4)


def test_value_column_is_the_true_value_at_the_modules_gamma(monkeypatch):
    seen = {}

    def probe(batch: StepBatch, *, gamma: float = 0.5) -> CreditResult:
        seen["value"] = batch.require("value", "a critic").copy()
        seen["embedding"] = batch.require("embedding", "hidden states")
        return CreditResult(np.zeros(len(batch)))

    def plain(batch: StepBatch) -> CreditResult:
        seen["plain"] = (batch.value, batch.embedding)
        return CreditResult(np.zeros(len(batch)))

    monkeypatch.setitem(credit_registry._MODULES, "probe", probe)
    monkeypatch.setitem(credit_registry._NEEDS, "probe", frozenset({"value", "embedding"}))
    monkeypatch.setitem(credit_registry._MODULES, "plain", plain)
    monkeypatch.setitem(credit_registry._NEEDS, "plain", frozenset())
    inputs = _inputs()
    spec = parse_module_spec("probe")
    assert module_gamma(spec) == 0.5
    _, status = run_module_spec(spec, inputs)
    assert status == "ok"
    np.testing.assert_allclose(seen["value"], inputs.true_value(0.5))
    assert seen["embedding"].shape == (len(inputs.rollouts), 64)
    # A module that does not declare them gets neither column (they are built on demand).
    assert run_module_spec(parse_module_spec("plain"), inputs)[1] == "ok"
    assert seen["plain"] == (None, None)


def test_missing_inputs_and_failures_are_reported_not_raised(monkeypatch):
    def needs_column(batch, *, k: int = 1):
        batch.require("turn_reward", "set extras['turn_reward']")

    def needs_option(batch, *, weight):
        raise AssertionError("never called")

    def broken(batch):
        raise ZeroDivisionError("boom")

    for name, fn in (
        ("needs_column", needs_column),
        ("needs_option", needs_option),
        ("broken", broken),
    ):
        monkeypatch.setitem(credit_registry._MODULES, name, fn)
    inputs = _inputs(4)
    assert run_module_spec(parse_module_spec("needs_column"), inputs)[1].startswith(
        "skipped: this credit module needs"
    )
    assert (
        run_module_spec(parse_module_spec("needs_option"), inputs)[1]
        == "skipped: needs option(s) weight with no default"
    )
    assert (
        run_module_spec(parse_module_spec("broken"), inputs)[1] == "failed: ZeroDivisionError: boom"
    )


def test_parse_spec():
    assert parse_module_spec("grpo:mode=mean") == ModuleSpec(
        "grpo[mode=mean]", "grpo", {"mode": "mean"}
    )
    assert parse_module_spec("ref:mc-minus-true-V:gamma=0.95").options == {"gamma": 0.95}
    nested = parse_module_spec(
        "compose:{'base': 'rloo', 'terms': [{'name': 'gigpo', 'weight': 0.5}]}"
    )
    assert nested.options == {"base": "rloo", "terms": [{"name": "gigpo", "weight": 0.5}]}
    assert nested.label == "compose[base=rloo,terms=[{name:gigpo,weight:0.5}]]"
    with pytest.raises(ValueError, match="unknown credit module"):
        parse_module_spec("no_such_module")
    with pytest.raises(ValueError, match="key=value"):
        parse_module_spec("grpo:mean")
