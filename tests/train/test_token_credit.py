"""Token shapers in training: the learner's signals, token advantages in the update, smoke runs."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from agentrl.credit import token_shapers

from agentrl.config import ConfigError, load_config
from agentrl.learner import Learner, LearnerConfig, collate
from agentrl.recipe import train
from agentrl.rollout import to_step_batch
from agentrl.training.preflight import preflight
from agentrl.training.token_credit import _closing_ids, hindsight_sequences

from .helpers import SMOKE, make_cfg
from .test_learner import _rollout


def _delta(model, m):
    return torch.cat(
        [(p0 - p.detach()).flatten() for p0, p in zip(model.parameters(), m.parameters())]
    )


def test_broadcast_token_advantages_update_exactly_as_step_advantages(tiny, sokoban_pool):
    model, tok = tiny
    eps = _rollout(model, tok, sokoban_pool, constrained=False, max_new_tokens=5)
    _, seqs = to_step_batch(eps)
    adv = np.random.default_rng(3).normal(size=len(seqs)).astype(np.float32)
    adv[::3] = 0.0
    out = []
    for ent in (0.0, 0.01):  # with and without the zero-advantage skip
        for tokens in (None, [np.full(len(s.response_ids), adv[s.step_row]) for s in seqs]):
            m = copy.deepcopy(model)
            cfg = LearnerConfig(epochs=1, minibatch_size=8, micro_batch_size=4, entropy_coef=ent)
            learner = Learner(m, cfg, tok.pad_token_id)
            learner.optimizer = torch.optim.SGD(learner.optimizer.param_groups[0]["params"], lr=1.0)
            learner.update(seqs, adv, seed=0, token_advantages=tokens)
            out.append(_delta(model, m))
    assert out[0].abs().max() > 1e-4
    assert torch.allclose(out[0], out[1], atol=1e-7) and torch.allclose(out[2], out[3], atol=1e-7)


def test_loss_mask_removes_tokens_from_the_policy_loss(tiny, sokoban_pool):
    model, tok = tiny
    eps = _rollout(model, tok, sokoban_pool, constrained=False, max_new_tokens=5)
    _, seqs = to_step_batch(eps)
    adv = np.ones(len(seqs), np.float32)
    cfg = LearnerConfig(epochs=1, minibatch_size=64, micro_batch_size=64, entropy_coef=0.0)
    # masking every token == zero advantages everywhere: no policy gradient at all
    m = copy.deepcopy(model)
    learner = Learner(m, cfg, tok.pad_token_id)
    learner.optimizer = torch.optim.SGD(learner.optimizer.param_groups[0]["params"], lr=1.0)
    masks = [np.zeros(len(s.response_ids), bool) for s in seqs]
    learner.update(seqs, adv, loss_masks=masks)
    assert _delta(model, m).abs().max() == 0
    with pytest.raises(ValueError, match="loss_masks"):
        learner.update(seqs, adv, loss_masks=masks[:-1])


def test_token_signals_match_the_logits(tiny, sokoban_pool):
    model, tok = tiny
    eps = _rollout(model, tok, sokoban_pool, constrained=False, max_new_tokens=5)
    _, seqs = to_step_batch(eps)
    learner = Learner(model, LearnerConfig(), tok.pad_token_id, keep_reference=True)
    want = {"entropy", "self_certainty", "token_logit", "ref_logprob", "logprob", "token_id"}
    sig = learner.token_signals(seqs, want)
    s = seqs[0]
    with torch.no_grad():
        b = collate([s], tok.pad_token_id)
        logits = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits[0].float()
    P, n = len(s.prompt_ids), len(s.response_ids)
    lg = logits[P - 1 : P - 1 + n]
    cert = torch.logsumexp(lg, -1) - lg.mean(-1)
    chosen = lg.gather(-1, torch.as_tensor(s.response_ids).view(-1, 1)).squeeze(-1)
    lp = torch.log_softmax(lg, -1)
    ent = -(lp.exp() * lp).sum(-1)
    np.testing.assert_allclose(sig["self_certainty"][0], cert.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(sig["token_logit"][0], chosen.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(sig["entropy"][0], ent.numpy(), rtol=1e-4, atol=1e-4)
    # the reference is the initial policy: its log-probs are the sampling log-probs
    np.testing.assert_allclose(sig["ref_logprob"][0], s.old_logprobs, atol=1e-4)
    assert list(sig["token_id"][0]) == s.response_ids
    assert [len(x) for x in sig["entropy"]] == [len(x.response_ids) for x in seqs]


def test_hindsight_note_goes_at_the_end_of_the_last_user_message(tiny, sokoban_pool):
    model, tok = tiny
    eps = _rollout(model, tok, sokoban_pool, constrained=False, max_new_tokens=5)
    _, seqs = to_step_batch(eps)
    teacher = hindsight_sequences(tok, eps, seqs)
    closing = _closing_ids(tok)
    assert closing and len(teacher) == len(seqs)
    for s, t in zip(seqs, teacher):
        assert t.response_ids == s.response_ids and t.step_row == s.step_row
        assert t.prompt_ids[-len(closing) :] == closing
        assert t.prompt_ids[: len(s.prompt_ids) - len(closing)] == s.prompt_ids[: -len(closing)]
        text = tok.decode(t.prompt_ids)
        assert "Hindsight" in text and ("succeeded" in text or "failed" in text)


@pytest.mark.parametrize("shaper", token_shapers.available())
def test_smoke_run_per_token_shaper(tmp_path, shaper):
    cfg = load_config(
        make_cfg(
            *SMOKE,
            "credit=gigpo",
            f"credit.token={shaper}",
            "trainer.eval_initial=false",
            "env.eval_episodes=2",
            "rollout.tasks_per_iter=4",
        )
    )
    preflight(cfg, tmp_path)
    train(cfg, tmp_path)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if r["phase"] == "train"]
    assert len(train_rows) == 2
    for r in train_rows:
        assert np.isfinite(r["loss/grad_norm"]) and np.isfinite(r["loss/policy_loss"])
        assert r["credit/token_advantage_abs_mean"] >= 0
        assert r["credit/token_sign_flips"] == 0  # no shaper flips a step advantage's sign


def test_token_shaper_config_errors_name_the_key(tmp_path):
    cfg = load_config(make_cfg(*SMOKE, "credit.token=ucas", "+credit.token_options.nope=1"))
    with pytest.raises(ConfigError, match="credit.token_options.nope"):
        preflight(cfg, tmp_path)
    with pytest.raises(ConfigError, match="credit.token"):
        load_config(make_cfg(*SMOKE, "credit.token=bogus"))
    with pytest.raises(ConfigError, match="token_options"):
        load_config(make_cfg(*SMOKE, "+credit.token_options.tau=1"))


def test_distinct_rows_groups_equal_sequences():
    from agentrl.learner.sequences import StepSequence, distinct_rows

    a = StepSequence([1, 2], [3], [-0.5], 0, [[3, 4]])
    b = StepSequence([1, 2], [3], [-0.9], 1, [[3, 4]])  # same tokens and constraint as a
    c = StepSequence([1, 2], [3], [-0.5], 2, [[3]])  # another constraint
    d = StepSequence([1, 2], [3], [-0.5], 3, None)
    rows, inverse = distinct_rows([a, b, c, d, a])
    assert rows.tolist() == [0, 2, 3]
    assert inverse.tolist() == [0, 0, 1, 2, 0]


def test_scoring_equal_sequences_once_gives_each_row_its_own_score(tiny, sokoban_pool):
    """Dedup in the no-grad passes: every row's signals equal those scored one row at a time."""
    model, tok = tiny
    eps = _rollout(model, tok, sokoban_pool, constrained=True, max_new_tokens=5)
    _, seqs = to_step_batch(eps)
    seqs = seqs + [copy.deepcopy(s) for s in seqs[:5]]  # guaranteed repeats
    learner = Learner(model, LearnerConfig(micro_batch_size=16), tok.pad_token_id)
    got = learner.token_signals(seqs, {"entropy", "self_certainty", "token_logit"})
    lps = learner.logprobs(seqs)
    for i in (0, 3, len(seqs) - 1):
        one = learner.token_signals([seqs[i]], {"entropy", "self_certainty", "token_logit"})
        for k in one:
            np.testing.assert_allclose(got[k][i], one[k][0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(lps[i], learner.logprobs([seqs[i]])[0], rtol=1e-5, atol=1e-6)
    assert got["entropy"][-1] is not got["entropy"][4]  # copies, not shared arrays


@pytest.mark.parametrize("shaper", ["progress", "stepopsd"])
def test_zero_advantage_steps_skip_the_extra_pass_and_shape_the_same(tiny, sokoban_pool, shaper):
    """progress and stepopsd scale the step advantage: their reference / teacher pass scores only
    steps with a non-zero advantage, and the token advantages equal shaping with every row scored."""
    from types import SimpleNamespace

    from agentrl.training.token_credit import shaped_token_advantages

    model, tok = tiny
    eps = _rollout(model, tok, sokoban_pool, constrained=False, max_new_tokens=5)
    batch, seqs = to_step_batch(eps)
    step_adv = np.random.default_rng(5).normal(size=len(batch.group))
    step_adv[::2] = 0.0
    learner = Learner(model, LearnerConfig(), tok.pad_token_id, keep_reference=True)
    scored: list[int] = []
    for name in ("logprobs", "token_signals"):
        fn = getattr(learner, name)

        def counting(s, *a, _fn=fn, **k):
            scored.append(len(s))
            return _fn(s, *a, **k)

        setattr(learner, name, counting)
    cfg = SimpleNamespace(credit=SimpleNamespace(token=shaper, token_options={}))
    got = shaped_token_advantages(cfg, learner, tok, eps, batch, seqs, step_adv)
    nonzero = sum(step_adv[s.step_row] != 0 for s in seqs)
    assert 0 < nonzero < len(seqs) and nonzero in scored and max(scored) <= len(seqs)
    # the truth: every row's signals, shaped directly
    if shaper == "progress":
        extra = {"ref_logprob": learner.token_signals(seqs, {"ref_logprob"})["ref_logprob"]}
    else:
        extra = {"teacher_logprob": learner.logprobs(hindsight_sequences(tok, eps, seqs))}
    lengths = [len(s.response_ids) for s in seqs]
    tb = token_shapers.TokenBatch(
        step=np.repeat([s.step_row for s in seqs], lengths),
        logprob=np.concatenate([s.old_logprobs for s in seqs]).astype(np.float64),
        **{k: np.concatenate(v).astype(np.float64) for k, v in extra.items()},
    )
    want = token_shapers.shape(batch, step_adv, tb, shaper)
    np.testing.assert_allclose(np.concatenate(got), want, rtol=1e-6, atol=1e-7)
    assert np.abs(want).max() > 0
