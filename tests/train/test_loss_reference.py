"""An independent check of the PPO loss: a small reference implementation of the loss that
docs/training.md ("The loss") documents, written here from that text and run on a real rollout of
the default setup (the tiny model on 5x5 Sokoban, constrained decoding), against the learner's
loss, gradients and metrics.

The reference calls none of the learner's code: it runs the model on each sequence alone (no
padding, no micro-batches), restricts the logits to the trie's allowed tokens itself, and forms
the loss, its denominators and the metrics from the documented formulas. Tolerances (float32, the
learner batching and padding what the reference runs one by one): the loss to 1e-6 absolute, every
gradient tensor to 1e-5 of the largest gradient entry, the metrics to 1e-5 relative (1e-7
absolute); the forced tokens' gradient exactly 0.
"""

from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest
import torch

from agentrl.backends.base import SamplingParams
from agentrl.backends.hf import HFBackend
from agentrl.learner import Learner, LearnerConfig, StepSequence
from agentrl.models import load_model
from agentrl.pool import EnvPool
from agentrl.rollout import (
    ActionFormat,
    PromptBuilder,
    PromptConfig,
    ResetSpec,
    run_episodes,
    to_step_batch,
)

from .conftest import SOKOBAN

LOSS_ATOL, GRAD_RTOL, METRIC_RTOL, METRIC_ATOL = 1e-6, 1e-5, 1e-5, 1e-7


@pytest.fixture(scope="module")
def rollout(tiny_path):
    """A real rollout of the default setup (observation-only prompt, constrained decoding: one
    sampled token among the four actions and three forced ones per step), plus a few steps of
    free generation (2 or 5 sampled tokens, the cap) so that sequences hold different numbers of tokens
    in the loss and the three aggregations differ. Advantages: a quarter exactly 0; old
    log-probs moved off the sampled ones so that the ratio is clipped on a real share of tokens."""
    torch.manual_seed(0)
    model, tok, _ = load_model(tiny_path)
    builder = PromptBuilder(
        tok,
        PromptConfig(instruction=False, history=0, admissible_actions=False, observation_prefix=""),
    )
    backend = HFBackend(model, tok.pad_token_id)
    pool = EnvPool([SOKOBAN] * 8)
    try:
        seqs = []
        for constrained, n, new_tokens in [(True, 8, 8), (False, 2, 2), (False, 2, 5)]:
            resets = [ResetSpec(g, seed=100 + g) for g in range(2) for _ in range(n // 2)]
            eps = run_episodes(pool, backend, builder, ActionFormat(), resets,
                               SamplingParams(max_new_tokens=new_tokens, seed=0),
                               max_steps=4 if constrained else 2,
                               constrained=constrained)  # fmt: skip
            seqs += to_step_batch(eps)[1]
    finally:
        pool.close()
    rng = np.random.default_rng(0)
    moved = []
    for row, s in enumerate(seqs):
        forced = _forced(s)
        old = np.asarray(s.old_logprobs) + np.where(forced, 0.0, rng.normal(0, 0.5, len(forced)))
        moved.append(StepSequence(s.prompt_ids, s.response_ids, old.tolist(), row, s.allowed))
    assert len({int((~_forced(s)).sum()) for s in moved}) >= 3  # mixed counts of loss tokens
    adv = rng.normal(size=len(moved)).astype(np.float32)
    adv[rng.random(len(moved)) < 0.25] = 0.0
    reference = copy.deepcopy(model)
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model, tok, moved, adv, reference


# -- the reference -------------------------------------------------------------------------------
def _forced(s: StepSequence) -> np.ndarray:
    """Tokens the trie left no choice (one allowed token); none under free generation."""
    return np.array(
        [s.allowed is not None and len(s.allowed[j]) == 1 for j in range(len(s.response_ids))],
        dtype=bool,
    )


def _token_terms(model, s: StepSequence):
    """Per response token: log-prob and entropy of the sampling distribution (the logits at the
    token's position, restricted to its allowed tokens), and whether it was forced."""
    ids = torch.tensor([s.prompt_ids + s.response_ids])
    logits = model(input_ids=ids, use_cache=False).logits[0].float()
    P = len(s.prompt_ids)
    logp, ent = [], []
    for j, t in enumerate(s.response_ids):
        allowed = list(s.allowed[j]) if s.allowed is not None else list(range(logits.shape[-1]))
        sub = torch.log_softmax(logits[P - 1 + j, allowed], dim=-1)
        logp.append(sub[allowed.index(t)])
        ent.append(-(sub.exp() * sub).sum())
    forced = torch.tensor(
        [s.allowed is not None and len(a) == 1 for a in s.allowed or s.response_ids]
    )
    return torch.stack(logp), torch.stack(ent), forced


def reference_loss(model, ref_model, seqs, adv, cfg: LearnerConfig):
    """The documented loss of one mini-batch holding every sequence, and its metrics."""
    per_seq = []  # (in-loss mask, pg term, entropy, kl, diagnostics) per sequence
    skip = cfg.entropy_coef == 0 and cfg.kl_coef == 0  # zero-advantage steps: no forward
    for s in seqs:
        logp, ent, forced = _token_terms(model, s)
        keep = ~forced if cfg.loss_tokens == "sampled" else torch.ones_like(forced)
        a = float(adv[s.step_row])
        ratio = torch.exp((logp - torch.tensor(s.old_logprobs)).clamp(-20, 20))
        unclipped = ratio * a
        clipped = ratio.clamp(1 - cfg.clip_low, 1 + cfg.clip_high) * a
        pg = -torch.minimum(unclipped, clipped)
        kl = torch.zeros_like(logp)
        if cfg.kl_coef > 0:
            with torch.no_grad():
                ref_logp, _, _ = _token_terms(ref_model, s)
            d = logp - ref_logp
            kl = 0.5 * d**2 if cfg.kl_estimator == "k2" else torch.exp(-d) - 1 + d
        with torch.no_grad():
            lr = torch.log(ratio)
            diag = torch.stack([(clipped < unclipped).float(), ratio, ratio - 1 - lr])
        per_seq.append((keep, pg, ent, kl, diag, a != 0 or not skip))
    n = [int(k.sum()) for k, *_ in per_seq]
    seqs_with_tokens = sum(1 for m in n if m > 0)

    def agg(i):  # the documented aggregation of term i over every sequence
        if cfg.loss_agg == "token-mean":
            return sum(t[i][t[0]].sum() for t in per_seq) / max(sum(n), 1)
        if cfg.loss_agg == "seq-mean-token-mean":
            total = sum(t[i][t[0]].sum() / m for t, m in zip(per_seq, n) if m > 0)
            return total / max(seqs_with_tokens, 1)
        return sum(t[i][t[0]].sum() for t in per_seq) / max(seqs_with_tokens, 1)

    loss = agg(1) - cfg.entropy_coef * agg(2) + cfg.kl_coef * agg(3)
    used = [t for t in per_seq if t[5]]  # the metrics: over the tokens of the steps processed
    tokens = sum(float(t[0].sum()) for t in used)
    with torch.no_grad():
        metrics = {
            "entropy": sum(float(t[2][t[0]].sum()) for t in used) / tokens,
            "kl_ref": sum(float(t[3][t[0]].sum()) for t in used) / tokens,
            **{
                k: sum(float(t[4][i][t[0]].sum()) for t in used) / tokens
                for i, k in enumerate(("clip_frac", "ratio_mean", "approx_kl_old"))
            },  # fmt: skip
            "loss_token_fraction": tokens / sum(len(t[0]) for t in used),
        }
    return loss, metrics


# -- the comparison ------------------------------------------------------------------------------
def _compare(rollout, micro: int = 5, budget: int | None = 400, **options):
    model0, tok, seqs, adv, ref_model = rollout
    model = copy.deepcopy(model0)
    cfg = LearnerConfig(lr=1e-3, epochs=1, minibatch_size=len(seqs), micro_batch_size=micro,
                        micro_batch_tokens=budget, max_grad_norm=0.0, **options)  # fmt: skip
    learner = Learner(model, cfg, tok.pad_token_id)
    if learner.reference is not None:
        learner.reference.load_state_dict(ref_model.state_dict())
    params = [p for p in model.parameters() if p.requires_grad]
    loss, metrics = reference_loss(model, ref_model, seqs, adv, cfg)
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    got = learner.update(seqs, adv, seed=0)  # one mini-batch: p.grad is its gradient
    assert abs(got["loss"] - float(loss.detach())) <= LOSS_ATOL, (got["loss"], float(loss))
    scale = max(float(g.abs().max()) for g in grads if g is not None)
    assert scale > 1e-4  # the loss moves the weights
    for p, g in zip(params, grads):
        g = torch.zeros_like(p) if g is None else g
        worst = float((p.grad - g).abs().max())
        assert worst <= GRAD_RTOL * scale, (worst, scale)
    for k, v in metrics.items():
        assert got[k] == pytest.approx(v, rel=METRIC_RTOL, abs=METRIC_ATOL), k
    return got


CASES = list(
    itertools.product(
        ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"],
        [(0.2, 0.2), (0.1, 0.3)],
        [None, "k2", "k3"],
        [0.0, 0.05],
    )
)


@pytest.mark.parametrize(("agg", "clip", "kl", "entropy"), CASES)
def test_the_learner_computes_the_documented_loss(rollout, agg, clip, kl, entropy):
    got = _compare(rollout, loss_agg=agg, clip_low=clip[0], clip_high=clip[1],
                   kl_coef=0.1 if kl else 0.0, kl_estimator=kl or "k2",
                   entropy_coef=entropy)  # fmt: skip
    assert 0.15 < got["clip_frac"] < 0.6  # the ratio is clipped on a real share of tokens
    assert 0.25 < got["loss_token_fraction"] < 0.6  # most constrained tokens are forced


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_loss_tokens_all_keeps_the_forced_tokens_in_the_arithmetic(rollout, agg):
    got = _compare(rollout, loss_agg=agg, kl_coef=0.1, kl_estimator="k3", entropy_coef=0.05,
                   loss_tokens="all")  # fmt: skip
    assert got["loss_token_fraction"] == 1.0


def test_metrics_do_not_depend_on_the_micro_batch_layout(rollout):
    """Token-weighted means over the tokens in the loss: the same for any micro-batch size or
    token cap (2 epochs of 3 mini-batches, so the mini-batches also hold different counts)."""
    model0, tok, seqs, adv, _ = rollout
    runs = []
    for micro, budget in [(64, None), (7, None), (1, None), (64, 120)]:
        cfg = LearnerConfig(epochs=2, minibatch_size=12, micro_batch_size=min(micro, 12),
                            micro_batch_tokens=budget, entropy_coef=0.0)  # fmt: skip
        learner = Learner(copy.deepcopy(model0), cfg, tok.pad_token_id)
        runs.append(learner.update(seqs, adv, seed=3))  # zero advantages skipped (no entropy)
    for k in ("entropy", "clip_frac", "ratio_mean", "approx_kl_old", "loss", "policy_loss"):
        for other in runs[1:]:
            assert other[k] == pytest.approx(runs[0][k], rel=1e-5, abs=1e-7), k


def test_forced_tokens_get_exactly_zero_gradient_and_adam_leaves_their_rows(rollout):
    """Tokens that only ever occur as forced response tokens (never in a prompt, never a
    candidate or the context of a sampled token: here ``</action>`` and EOS) get an embedding
    (= LM-head, tied) gradient of exactly 0, so AdamW leaves their rows bit-for-bit, while the
    rows of the sampled candidates move."""
    model0, tok, seqs, adv, _ = rollout
    seqs = [s for s in seqs if s.allowed is not None]  # the default setup's steps
    forced = {t for s in seqs for t, a in zip(s.response_ids, s.allowed) if len(a) == 1}
    touched = {t for s in seqs for t in s.prompt_ids}
    for s in seqs:
        for j, a in enumerate(s.allowed):
            if len(a) > 1:  # a choice: its candidates and its context are trained
                touched |= set(a) | set(s.response_ids[:j])
    only_forced = sorted(forced - touched)
    assert only_forced, "the rollout has no token that only occurs forced"
    model = copy.deepcopy(model0)
    # 8 AdamW steps: with loss_tokens=all, float noise in these rows' gradient (up to 3e-9) made
    # Adam move them by ~0.2 lr here; masked before the loss, they get exactly 0
    learner = Learner(model, LearnerConfig(epochs=2, minibatch_size=8), tok.pad_token_id)
    before = model.get_input_embeddings().weight.detach().clone()
    learner.update(seqs, adv, seed=0)
    emb = model.get_input_embeddings().weight
    rows = torch.tensor(only_forced)
    assert torch.equal(emb.grad[rows], torch.zeros_like(emb.grad[rows]))
    assert torch.equal(emb.detach()[rows], before[rows])
    moved = sorted({t for s in seqs for a in s.allowed if len(a) > 1 for t in a})
    assert (emb.detach()[moved] != before[moved]).any(dim=1).all()


def test_repeated_rows_share_a_forward_and_keep_their_own_terms(rollout):
    """Rows with equal token ids (a group's rollouts taking the same action in the same state)
    run one forward pass between them, but each keeps its own advantage and behaviour
    log-probs: the loss, gradients and metrics still equal the reference's, which runs every
    row alone."""
    model0, tok, seqs, adv, ref_model = rollout
    rng = np.random.default_rng(1)
    extra, extra_adv = [], []
    for k, s in enumerate(seqs[::3]):  # a third of the rows repeated, some twice
        for _ in range(1 + k % 2):
            old = np.asarray(s.old_logprobs) + np.where(_forced(s), 0.0, rng.normal(0, 0.3))
            extra.append(StepSequence(s.prompt_ids, s.response_ids, old.tolist(),
                                      len(seqs) + len(extra), s.allowed))  # fmt: skip
            extra_adv.append(rng.normal())
    both = (model0, tok, seqs + extra, np.concatenate([adv, extra_adv]).astype(np.float32),
            ref_model)  # fmt: skip
    shared = []
    for micro, budget in [(64, None), (5, 400), (1, None)]:
        got = _compare(both, micro=micro, budget=budget, kl_coef=0.1, entropy_coef=0.05)
        shared.append(got["forward_row_fraction"])
    n_distinct = len({(tuple(s.prompt_ids), tuple(s.response_ids)) for s in both[2]})
    assert shared[0] == pytest.approx(n_distinct / len(both[2]))  # one micro-batch: all shared
    assert shared[0] <= shared[1] < 1.0 and shared[2] == 1.0


def test_dropout_turns_sharing_off(tiny_path):
    """With dropout each row draws its own mask, so equal rows are no longer equal in training:
    the learner then runs them separately."""
    from agentrl.learner.learner import has_dropout

    model, tok, _ = load_model(tiny_path)
    assert not has_dropout(model)
    assert Learner(model, LearnerConfig(), tok.pad_token_id)._shares_rows
    model.config.attention_dropout = 0.1
    assert has_dropout(model)
    assert not Learner(model, LearnerConfig(), tok.pad_token_id)._shares_rows
    model.config.attention_dropout = 0.0
    model.model.layers[0].mlp.add_module("drop", torch.nn.Dropout(0.2))
    assert has_dropout(model)
