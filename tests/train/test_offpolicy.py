"""Off-policy corrections (trainer.old_logprobs, trainer.correction): the weights and masks on
hand-computed cases, the decoupled objective's reduction to PPO, and the learner's recomputed
pi_old on hf rollouts (first-epoch ratio of 1, the mismatch metrics, masked tokens' gradient)."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import torch

from agentrl.backends.base import SamplingParams
from agentrl.backends.hf import HFBackend
from agentrl.config import ConfigError, load_config
from agentrl.learner import Learner, LearnerConfig, StepSequence
from agentrl.learner.corrections import (
    correction_weights,
    decoupled_weights,
    icepop_weights,
    mismatch_metrics,
    seq_mask_tis_weights,
    tis_weights,
)
from agentrl.learner.losses import ppo_clip_loss
from agentrl.recipe import train
from agentrl.rollout import (
    ActionFormat,
    PromptBuilder,
    PromptConfig,
    ResetSpec,
    run_episodes,
    to_step_batch,
)

from .helpers import SMOKE, make_cfg

L = np.log


# -- the weights and masks, by hand ----------------------------------------------------------
def test_tis_truncates_at_the_cap():
    w, t = tis_weights(L([0.5, 1.0, 3.0]), cap=2.0)
    np.testing.assert_allclose(w, [0.5, 1.0, 2.0])
    assert t.tolist() == [False, False, True]


def test_icepop_masks_outside_the_band_and_keeps_the_ratio_inside():
    w, m = icepop_weights(L([0.4, 0.5, 1.2, 5.0, 6.0]), 0.5, 5.0)
    np.testing.assert_allclose(w, [0.0, 0.5, 1.2, 5.0, 0.0])
    assert m.tolist() == [True, False, False, False, True]


def test_seq_mask_tis_gates_on_the_geometric_mean_of_the_tokens_in_the_loss():
    # geometric mean sqrt(2 * 8) = 4 is inside [0.5, 5]: the token ratios are kept as weights
    w, m = seq_mask_tis_weights(L([2.0, 8.0]), [True, True], 0.5, 5.0)
    np.testing.assert_allclose(w, [2.0, 8.0])
    assert not m.any()
    # 8 is outside: the whole sequence is masked
    w, m = seq_mask_tis_weights(L([8.0, 8.0]), [True, True], 0.5, 5.0)
    assert w.tolist() == [0.0, 0.0] and m.all()
    # a forced token (ratio 1) out of the loss does not dilute the mean: exp(log 8) = 8 > 5
    w, m = seq_mask_tis_weights(np.array([L(8.0), 0.0]), [True, False], 0.5, 5.0)
    assert m.all()
    # counted, it would: sqrt(8) = 2.83 is inside
    _, m = seq_mask_tis_weights(np.array([L(8.0), 0.0]), [True, True], 0.5, 5.0)
    assert not m.any()
    # below the band too: sqrt(0.1 * 0.4) = 0.2 < 0.5
    _, m = seq_mask_tis_weights(L([0.1, 0.4]), [True, True], 0.5, 5.0)
    assert m.all()


def test_decoupled_weight_is_the_behaviour_ratio_filtered_above_the_cap():
    w, m = decoupled_weights(L([0.5, 3.0, 6.0]), cap=5.0)
    np.testing.assert_allclose(w, [0.5, 3.0, 0.0])
    assert m.tolist() == [False, False, True]
    w, m = decoupled_weights(L([0.5, 3.0, 6.0]), cap=None)
    np.testing.assert_allclose(w, [0.5, 3.0, 6.0])
    assert not m.any()


def test_correction_weights_per_sequence_and_refusals():
    old = [np.array([-1.0, -2.0]), np.array([-0.5])]
    eng = [np.array([-1.0 - L(3.0), -2.0]), np.array([-0.5 + L(4.0)])]
    keep = [np.ones(2, bool), np.ones(1, bool)]
    cw = correction_weights("tis", old, eng, keep, cap=2.0)
    np.testing.assert_allclose(cw.weights[0], [2.0, 1.0])
    np.testing.assert_allclose(cw.weights[1], [0.25])
    assert cw.truncated[0].tolist() == [True, False]
    assert correction_weights("none", old, eng, keep) is None
    with pytest.raises(ValueError, match="correction must be one of"):
        correction_weights("bogus", old, eng, keep)


def test_mismatch_metrics_by_hand():
    d = np.array([0.0, L(2.0), -L(2.0), 0.1])
    m = mismatch_metrics(d, weights=np.array([1.0, 2.0, 0.5, 1.0]), masked=np.array([0, 0, 1, 0]))
    assert m["offpolicy/tokens"] == 4
    assert m["offpolicy/logprob_diff_mean"] == pytest.approx(0.1 / 4)
    assert m["offpolicy/logprob_absdiff_mean"] == pytest.approx((2 * L(2.0) + 0.1) / 4)
    # |d| sorted: 0, 0.1, ln2, ln2; numpy's linear interpolation
    assert m["offpolicy/logprob_absdiff_p50"] == pytest.approx((0.1 + L(2.0)) / 2)
    assert m["offpolicy/logprob_absdiff_max"] == pytest.approx(L(2.0))
    # k3 of KL(engine || learner): mean of r - 1 - log r, r = exp(d)
    k3 = (0.0 + (1 - L(2.0)) + (-0.5 + L(2.0)) + (math.exp(0.1) - 1.1)) / 4
    assert m["offpolicy/kl_engine_learner_k3"] == pytest.approx(k3)
    assert m["offpolicy/weight_mean"] == pytest.approx(1.125)
    assert m["offpolicy/masked_frac"] == 0.25
    assert "offpolicy/truncated_frac" not in m
    assert mismatch_metrics(np.zeros(0)) == {"offpolicy/tokens": 0.0}


def test_decoupled_objective_is_ppo_when_behaviour_equals_proximal():
    g = torch.Generator().manual_seed(0)
    logp = torch.randn(3, 5, generator=g, requires_grad=True)
    old = torch.randn(3, 5, generator=g)
    adv = torch.randn(3, 5, generator=g)
    mask = torch.rand(3, 5, generator=g) > 0.2
    prox = [old[b].numpy() for b in range(3)]
    for cap in (None, 1.5):
        w = correction_weights("decoupled", prox, prox, [mask[b].numpy() for b in range(3)],
                               decoupled_cap=cap).weights  # fmt: skip
        assert all(np.array_equal(x, np.ones(5)) for x in w)
        weighted, _ = ppo_clip_loss(logp, old, adv, mask, weights=torch.as_tensor(np.stack(w)))
        plain, _ = ppo_clip_loss(logp, old, adv, mask)
        assert torch.equal(weighted, plain)
    # a weight of 0.5 halves the token's loss and its gradient, and is not differentiated
    half = torch.full((3, 5), 0.5, requires_grad=True)
    weighted, _ = ppo_clip_loss(logp, old, adv, mask, weights=half)
    plain, _ = ppo_clip_loss(logp, old, adv, mask)
    torch.testing.assert_close(weighted, 0.5 * plain)
    (gw,) = torch.autograd.grad(weighted.sum(), logp, retain_graph=True)
    (gp,) = torch.autograd.grad(plain.sum(), logp)
    torch.testing.assert_close(gw, 0.5 * gp)
    assert half.grad is None


# -- config ------------------------------------------------------------------------------------
def test_a_correction_without_recomputed_old_logprobs_is_refused(tiny):
    model, tok = tiny
    with pytest.raises(ConfigError, match="trainer.correction tis needs trainer.old_logprobs"):
        Learner(model, LearnerConfig(correction="tis"), tok.pad_token_id)
    with pytest.raises(ConfigError) as err:
        load_config(make_cfg("trainer.correction=icepop", "trainer.icepop_low=6"))
    assert "trainer.correction icepop needs trainer.old_logprobs=learner" in str(err.value)
    assert "trainer.icepop_low (6.0) must be < trainer.icepop_high (5.0)" in str(err.value)
    with pytest.raises(ConfigError, match="trainer.correction must be one of"):
        load_config(make_cfg("trainer.old_logprobs=learner", "trainer.correction=vtrace"))


# -- the learner on hf rollouts -------------------------------------------------------------
@pytest.fixture
def rollout_seqs(tiny, sokoban_pool):
    """Constrained-decoding rollouts of the tiny model (its trie renormalises the log-probs)."""
    model, tok = tiny
    builder = PromptBuilder(
        tok,
        PromptConfig(instruction=False, history=1, admissible_actions=False, observation_prefix=""),
    )
    resets = [ResetSpec(g, seed=100 + g) for g in range(2) for _ in range(3)]
    eps = run_episodes(sokoban_pool, HFBackend(model, tok.pad_token_id), builder, ActionFormat(),
                       resets, SamplingParams(max_new_tokens=8, seed=0), max_steps=3,
                       constrained=True)  # fmt: skip
    _, seqs = to_step_batch(eps)
    adv = np.random.default_rng(0).normal(size=len(seqs)).astype(np.float32)
    return seqs, adv


def _shifted(seqs, shift):
    """The sequences with the engine's log-probs moved by ``shift[i]`` (a mismatched engine)."""
    return [
        StepSequence(
            s.prompt_ids,
            s.response_ids,
            list(np.asarray(s.old_logprobs) + d),
            s.step_row,
            s.allowed,
        )  # fmt: skip
        for s, d in zip(seqs, shift)
    ]


def _cfg(n, **kw):
    return LearnerConfig(lr=1e-3, epochs=1, minibatch_size=n, micro_batch_size=4,
                         entropy_coef=0.0, **kw)  # fmt: skip


def test_recomputed_old_logprobs_give_a_first_epoch_ratio_of_one(tiny, rollout_seqs):
    model, tok = tiny
    seqs, adv = rollout_seqs
    rng = np.random.default_rng(1)
    noise = [rng.normal(0, 0.3, len(s.response_ids)) for s in seqs]
    mismatched = _shifted(seqs, noise)
    # one mini-batch, one epoch: the metrics are those of the first mini-batch, before its step
    engine = Learner(copy.deepcopy(model), _cfg(len(seqs)), tok.pad_token_id).update(
        mismatched, adv
    )
    got = Learner(model, _cfg(len(seqs), old_logprobs="learner"), tok.pad_token_id).update(
        mismatched, adv
    )
    assert engine["approx_kl_old"] > 1e-3  # the engine's log-probs are off by the noise
    assert abs(got["ratio_mean"] - 1.0) < 1e-6
    assert got["approx_kl_old"] < 1e-10  # k3 >= 0 per token: every ratio is 1 (float32)
    assert got["clip_frac"] == 0.0
    assert not any(k.startswith("offpolicy/") for k in engine)
    # the mismatch measured is the noise, on the sampled tokens (forced ones are out of the loss)
    kept = np.concatenate([-n[~s.forced()] for n, s in zip(noise, seqs)])
    assert got["offpolicy/tokens"] == len(kept) > 0
    assert got["offpolicy/logprob_diff_mean"] == pytest.approx(kept.mean(), abs=1e-5)
    assert got["offpolicy/logprob_absdiff_p90"] == pytest.approx(
        np.percentile(np.abs(kept), 90), abs=1e-5
    )
    k3 = np.mean(np.exp(kept) - 1 - kept)
    assert got["offpolicy/kl_engine_learner_k3"] == pytest.approx(k3, rel=1e-3)


def test_hf_engine_and_learner_agree_to_float32_rounding(tiny, rollout_seqs):
    model, tok = tiny
    seqs, adv = rollout_seqs
    cfg = _cfg(len(seqs), old_logprobs="learner", correction="tis")
    got = Learner(model, cfg, tok.pad_token_id).update(seqs, adv)
    assert got["offpolicy/logprob_absdiff_max"] < 1e-5
    assert got["offpolicy/truncated_frac"] == 0.0
    assert got["offpolicy/weight_mean"] == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("correction", ["icepop", "seq_mask_tis", "decoupled"])
def test_masked_tokens_get_no_gradient(tiny, rollout_seqs, correction):
    """An engine 3 nats more confident than the learner on every token: pi_old / pi_engine =
    e^-3 < 0.5 masks every token (icepop), every sequence (seq_mask_tis); the decoupled weight
    with a cap of 1.01 keeps them (e^-3 < cap), so those weights change."""
    model, tok = tiny
    seqs, adv = rollout_seqs
    shifted = _shifted(seqs, [np.full(len(s.response_ids), 3.0) for s in seqs])
    before = [p.detach().clone() for p in model.parameters()]
    cfg = _cfg(len(seqs), old_logprobs="learner", correction=correction, decoupled_cap=1.01)
    got = Learner(model, cfg, tok.pad_token_id).update(shifted, adv)
    moved = max(float((p.detach() - b).abs().max()) for p, b in zip(model.parameters(), before))
    if correction == "decoupled":
        assert got["offpolicy/masked_frac"] == 0.0 and moved > 1e-5
        assert got["offpolicy/weight_mean"] == pytest.approx(math.exp(-3), rel=1e-4)
    else:
        assert got["offpolicy/masked_frac"] == 1.0 and got["offpolicy/weight_mean"] == 0.0
        assert moved == 0.0  # no gradient at all (Adam's first step from a zero gradient is 0)


def test_a_training_run_logs_the_mismatch_only_when_it_is_measured(tmp_path):
    over = ("trainer.iterations=1", "trainer.eval_initial=false", "env.eval_episodes=2")
    train(load_config(make_cfg(*SMOKE, *over, "trainer.old_logprobs=learner",
                               "trainer.correction=icepop")), tmp_path / "a")  # fmt: skip
    rows = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    row = next(r for r in rows if r["phase"] == "train")
    assert row["offpolicy/tokens"] > 0 and row["offpolicy/masked_frac"] == 0.0
    assert row["offpolicy/logprob_absdiff_max"] < 1e-5  # hf: the learner's own model samples
