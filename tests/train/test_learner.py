"""The learner: advantages on exactly the response tokens, loss decreases, accumulation, guards."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.backends.base import SamplingParams
from agentrl.backends.hf import HFBackend
from agentrl.learner import (
    Learner,
    LearnerConfig,
    NonFiniteError,
    StepSequence,
    collate,
    response_forward,
    token_advantages,
)
from agentrl.learner.learner import _is_peft
from agentrl.learner.losses import aggregate, kl_penalty, ppo_clip_loss
from agentrl.learner.weights import policy_state_dict
from agentrl.models import apply_lora
from agentrl.rollout import (
    ActionFormat,
    PromptBuilder,
    PromptConfig,
    ResetSpec,
    run_episodes,
    to_step_batch,
)


def _rollout(model, tok, pool, constrained=True, max_new_tokens=8, seed=0):
    builder = PromptBuilder(
        tok,
        PromptConfig(instruction=False, history=1, admissible_actions=False, observation_prefix=""),
    )
    resets = [ResetSpec(g, seed=100 + g) for g in range(2) for _ in range(4)]
    backend = HFBackend(model, tok.pad_token_id)
    sp = SamplingParams(max_new_tokens=max_new_tokens, seed=seed)
    return run_episodes(
        pool, backend, builder, ActionFormat(), resets, sp, max_steps=4, constrained=constrained
    )


@given(
    st.lists(st.tuples(st.integers(1, 6), st.integers(0, 5)), min_size=1, max_size=12), st.data()
)
@settings(max_examples=60, deadline=None)
def test_advantages_land_on_exactly_the_response_tokens(shapes, data):
    """Property: token (b, j) carries adv[step_row[b]] iff j < len(response b), else 0."""
    rows = data.draw(st.permutations(list(range(len(shapes)))))
    adv = np.asarray(
        data.draw(
            st.lists(
                st.floats(-5, 5, allow_nan=False).filter(lambda x: x != 0),
                min_size=len(shapes),
                max_size=len(shapes),
            )
        ),
        np.float32,
    )
    seqs = [
        StepSequence(list(range(1, p + 1)), list(range(7, 7 + r)), [0.0] * r, row)
        for (p, r), row in zip(shapes, rows)
    ]
    batch = collate(seqs, pad_token_id=0)
    tok_adv = token_advantages(batch, adv).numpy()
    for b, s in enumerate(seqs):
        n = len(s.response_ids)
        assert np.all(tok_adv[b, :n] == adv[s.step_row])
        assert np.all(tok_adv[b, n:] == 0)
        # the response window holds exactly the response ids, right after the prompt
        P = batch.prompt_width
        assert batch.input_ids[b, P : P + n].tolist() == s.response_ids
        assert batch.input_ids[b, P - len(s.prompt_ids) : P].tolist() == s.prompt_ids


def test_multi_step_episodes_map_rows_to_their_steps(tiny, sokoban_pool):
    model, tok = tiny
    eps = _rollout(model, tok, sokoban_pool)
    batch, seqs = to_step_batch(eps)
    assert len(seqs) == len(batch) == sum(len(e.steps) for e in eps)
    k = 0
    for e in eps:
        for t, s in enumerate(e.steps):
            assert seqs[k].step_row == k and batch.t[k] == t and batch.traj[k] == e.traj
            assert seqs[k].response_ids == s.response_ids and seqs[k].prompt_ids == s.prompt_ids
            k += 1
    adv = np.arange(1, len(seqs) + 1, dtype=np.float32)  # distinct per step
    coll = collate(seqs, tok.pad_token_id)
    tok_adv = token_advantages(coll, adv).numpy()
    for b, s in enumerate(seqs):
        assert set(tok_adv[b, : len(s.response_ids)]) == {adv[s.step_row]}
        assert not tok_adv[b, len(s.response_ids) :].any()


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_a_training_step_lowers_the_loss_on_a_fixed_batch(tiny, sokoban_pool, agg):
    torch.manual_seed(0)
    model, tok = tiny
    eps = _rollout(model, tok, sokoban_pool, constrained=False, max_new_tokens=6)
    _, seqs = to_step_batch(eps)
    adv = np.random.default_rng(0).normal(size=len(seqs)).astype(np.float32)
    cfg = LearnerConfig(
        lr=1e-3, epochs=1, minibatch_size=len(seqs), micro_batch_size=7, loss_agg=agg
    )

    def loss_now():
        batch = collate(seqs, tok.pad_token_id)
        with torch.no_grad():
            out = response_forward(model, batch)
        pg, _ = ppo_clip_loss(
            out.logprobs, batch.old_logprobs, token_advantages(batch, adv), batch.response_mask
        )
        return float(aggregate(pg, batch.response_mask, agg))

    before = loss_now()
    Learner(model, cfg, tok.pad_token_id).update(seqs, adv)
    after = loss_now()
    assert after < before - 1e-4


def test_micro_batches_accumulate_to_the_big_batch_gradient(tiny, sokoban_pool):
    model, tok = tiny
    eps = _rollout(model, tok, sokoban_pool, constrained=False, max_new_tokens=5)
    _, seqs = to_step_batch(eps)
    adv = np.random.default_rng(1).normal(size=len(seqs)).astype(np.float32)
    results = []
    for micro in (len(seqs), 3):
        m = copy.deepcopy(model)
        cfg = LearnerConfig(
            lr=1.0,
            epochs=1,
            minibatch_size=len(seqs),
            micro_batch_size=micro,
            max_grad_norm=0.0,
            entropy_coef=0.01,
        )
        learner = Learner(m, cfg, tok.pad_token_id)
        learner.optimizer = torch.optim.SGD(
            learner.optimizer.param_groups[0]["params"], lr=1.0
        )  # step = -gradient
        learner.update(seqs, adv)
        results.append(
            torch.cat(
                [(p0 - p.detach()).flatten() for p0, p in zip(model.parameters(), m.parameters())]
            )
        )
    assert results[0].abs().max() > 1e-4
    assert torch.allclose(results[0], results[1], atol=1e-6)


def test_zero_advantage_skip_is_exact(tiny, sokoban_pool):
    model, tok = tiny
    eps = _rollout(model, tok, sokoban_pool)
    _, seqs = to_step_batch(eps)
    adv = np.random.default_rng(2).normal(size=len(seqs)).astype(np.float32)
    adv[::2] = 0.0
    out = []
    for ent in (0.0, 1e-12):  # a non-zero entropy bonus disables the skip
        m = copy.deepcopy(model)
        learner = Learner(
            m,
            LearnerConfig(epochs=1, minibatch_size=8, micro_batch_size=4, entropy_coef=ent),
            tok.pad_token_id,
        )
        learner.optimizer = torch.optim.SGD(
            learner.optimizer.param_groups[0]["params"], lr=1.0
        )  # step = -gradient
        learner.update(seqs, adv, seed=0)
        out.append(
            torch.cat(
                [(p0 - p.detach()).flatten() for p0, p in zip(model.parameters(), m.parameters())]
            )
        )
    assert out[0].abs().max() > 1e-4
    assert torch.allclose(out[0], out[1], atol=1e-6)


def test_non_finite_advantage_or_loss_stops_before_the_weights_change(tiny, sokoban_pool):
    model, tok = tiny
    eps = _rollout(model, tok, sokoban_pool)
    _, seqs = to_step_batch(eps)
    learner = Learner(model, LearnerConfig(), tok.pad_token_id)
    before = [p.detach().clone() for p in model.parameters()]
    adv = np.ones(len(seqs), np.float32)
    adv[3] = np.nan
    with pytest.raises(NonFiniteError, match="non-finite step advantages"):
        learner.update(seqs, adv)
    bad = [
        StepSequence(
            s.prompt_ids,
            s.response_ids,
            [float("nan")] * len(s.response_ids),
            s.step_row,
            s.allowed,
        )
        for s in seqs
    ]
    with pytest.raises(NonFiniteError, match="non-finite"):
        learner.update(bad, np.ones(len(seqs), np.float32))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_kl_estimators_by_hand():
    logp = torch.tensor([[-1.0, -2.0]])
    ref = torch.tensor([[-1.5, -1.0]])
    mask = torch.tensor([[True, False]])
    assert torch.allclose(kl_penalty(logp, ref, mask, "k1"), torch.tensor([[0.5, 0.0]]))
    assert torch.allclose(kl_penalty(logp, ref, mask, "k2"), torch.tensor([[0.125, 0.0]]))
    k3 = np.exp(-0.5) - 1 + 0.5
    assert torch.allclose(
        kl_penalty(logp, ref, mask, "k3"), torch.tensor([[k3, 0.0]], dtype=torch.float32)
    )


def test_ppo_clip_by_hand():
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1]]))
    old = torch.zeros(1, 3)
    adv = torch.tensor([[1.0, -1.0, 2.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    loss, stats = ppo_clip_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.28)
    # ratio 1.5, A>0 -> clipped at 1.28; ratio 0.5, A<0 -> clipped at 0.8 (-0.8 * -1 = 0.8 loss); ratio 1.1 unclipped
    assert torch.allclose(loss, torch.tensor([[-1.28, 0.8, -2.2]]), atol=1e-6)
    # per-token diagnostics: 1 where the clipped term is the smaller, the ratio itself
    assert stats["clip_frac"].tolist() == [[1.0, 1.0, 0.0]]
    assert torch.allclose(stats["ratio_mean"], torch.tensor([[1.5, 0.5, 1.1]]), atol=1e-6)


def test_lora_reference_is_the_adapter_disabled_model(tiny, sokoban_pool):
    model, tok = tiny
    base_copy = copy.deepcopy(model)
    peft_model = apply_lora(model, r=4, alpha=8)
    assert _is_peft(peft_model)
    eps = _rollout(peft_model, tok, sokoban_pool, constrained=False, max_new_tokens=4)
    _, seqs = to_step_batch(eps)
    learner = Learner(peft_model, LearnerConfig(lr=1e-2, kl_coef=0.1, epochs=1), tok.pad_token_id)
    assert learner.reference is None  # no second copy
    adv = np.random.default_rng(3).normal(size=len(seqs)).astype(np.float32)
    m = learner.update(seqs, adv)
    assert m["kl_ref"] >= 0.0
    ref_lp = learner.logprobs(seqs, reference=True)
    pol_lp = learner.logprobs(seqs)
    with torch.no_grad():
        base_out = response_forward(base_copy, collate(seqs, tok.pad_token_id))
    for i, s in enumerate(seqs):
        assert np.allclose(
            ref_lp[i], base_out.logprobs[i, : len(s.response_ids)].numpy(), atol=1e-5
        )
    assert any(
        not np.allclose(a, b, atol=1e-4) for a, b in zip(ref_lp, pol_lp)
    )  # the adapters moved
    # merged weights reproduce the adapted policy in a plain model
    plain = copy.deepcopy(base_copy)
    plain.load_state_dict(policy_state_dict(peft_model))
    with torch.no_grad():
        merged = response_forward(plain, collate(seqs, tok.pad_token_id))
    for i, s in enumerate(seqs):
        assert np.allclose(pol_lp[i], merged.logprobs[i, : len(s.response_ids)].numpy(), atol=1e-4)


def test_value_head_learns_returns(tiny, sokoban_pool):
    model, tok = tiny
    eps = _rollout(model, tok, sokoban_pool)
    _, seqs = to_step_batch(eps)
    learner = Learner(
        model,
        LearnerConfig(lr=1e-2, epochs=4, minibatch_size=64, value_coef=1.0),
        tok.pad_token_id,
        value_head=True,
    )
    values, _ = learner.prompt_features([s.prompt_ids for s in seqs])
    assert values is not None and np.allclose(values, 0.0)  # zero-initialised head
    returns = np.full(len(seqs), 2.0)
    m = learner.update(seqs, np.zeros(len(seqs), np.float32), returns=returns, old_values=values)
    new_values, _ = learner.prompt_features([s.prompt_ids for s in seqs])
    assert m["value_loss"] > 0 and np.abs(new_values - 2.0).mean() < np.abs(values - 2.0).mean()


def test_non_finite_weights_after_an_update_stop_training(tiny):
    """A finite but absurd step (as lr=1e30 gives) leaves inf/NaN weights: the update says so.
    (All-zero advantages and no entropy term: no loss is computed, so only the weight check sees it.)"""
    from agentrl.learner import NonFiniteError

    model, tok = tiny
    cfg = LearnerConfig(lr=1.0, epochs=1, max_grad_norm=0.0, entropy_coef=0.0)
    learner = Learner(model, cfg, tok.pad_token_id)
    with torch.no_grad():
        next(model.parameters()).fill_(float("inf"))
    seqs = [StepSequence([1, 2, 3], [4, 5], [-1.0, -1.0], 0)]
    with pytest.raises(NonFiniteError, match="non-finite weights"):
        learner.update(seqs, np.zeros(1, dtype=np.float32))


def test_k1_is_refused_as_a_loss_term_with_its_reason(tiny):
    """k1's gradient as a loss term is 0 in expectation: a config that asks for it is refused
    (in load_config, and when a config made in Python reaches the learner)."""
    from agentrl.config import ConfigError

    model, tok = tiny
    with pytest.raises(ConfigError, match=r"trainer\.kl_estimator k1 is refused in the loss"):
        Learner(model, LearnerConfig(kl_coef=0.1, kl_estimator="k1"), tok.pad_token_id)


def test_the_capture_keeps_the_chosen_rows_as_the_loss_saw_them(tiny, sokoban_pool):
    """Trajectory traces' hook: only the chosen step rows, once each (their first pass), with the
    learner's log-probs of the weights before the step (one mini-batch: no step before the loss),
    the engine's as π_old, ρ = exp(difference), and the step advantage on every token."""
    from agentrl.learner.capture import TokenCapture

    model, tok = tiny
    eps = _rollout(model, tok, sokoban_pool, constrained=False, max_new_tokens=5)
    _, seqs = to_step_batch(eps)
    adv = np.random.default_rng(3).normal(size=len(seqs)).astype(np.float32)
    learner = Learner(
        model, LearnerConfig(epochs=2, minibatch_size=len(seqs), micro_batch_size=3),
        tok.pad_token_id,
    )  # fmt: skip
    chosen = [0, 3, len(seqs) - 1]
    before = learner.logprobs([seqs[i] for i in chosen])
    learner.capture = TokenCapture([seqs[i].step_row for i in chosen], 0.2, 0.2)
    learner.update(seqs, adv)
    got = learner.capture.got
    assert sorted(got) == sorted(seqs[i].step_row for i in chosen)
    for i, lp in zip(chosen, before):
        g, s = got[seqs[i].step_row], seqs[i]
        np.testing.assert_allclose(g["learner_logprob"], lp, atol=1e-5)
        np.testing.assert_allclose(g["old_logprob"], s.old_logprobs, atol=1e-6)
        np.testing.assert_allclose(g["ratio"], np.exp(lp - np.asarray(s.old_logprobs)), rtol=1e-4)
        np.testing.assert_allclose(g["advantage"], adv[s.step_row])
        assert len(g["clipped"]) == len(s.response_ids) and g["in_loss"].all()
