"""Token shapers (ucas, less, progress, stepopsd): hand-computed cases and properties."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from agentrl.credit import StepBatch
from agentrl.credit import token_shapers as ts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def one_step_batch(n: int, groups=None, success=None) -> StepBatch:
    """n one-step trajectories (each step its own rollout)."""
    return StepBatch.from_trajectories(
        [
            dict(
                group=0 if groups is None else groups[i],
                rewards=[0.0],
                states=["s"],
                success=bool(success[i]) if success is not None else False,
            )
            for i in range(n)
        ]
    )


def test_ucas_hand_computed():
    # step certainties (sums): [2, 1] -> mean 1.5, unbiased std sqrt(0.5) -> c = [+s, -s], s = .7071
    # A = [1, -1]: modifiers exp(-.25 s), exp(.35 * -s); logits [0, 2, 1, 4] -> min-max [0, .5, .25, 1]
    b = one_step_batch(2)
    tok = ts.TokenBatch(
        step=np.array([0, 0, 1, 1]),
        self_certainty=np.array([1.0, 1.0, 0.0, 1.0]),
        token_logit=np.array([0.0, 2.0, 1.0, 4.0]),
    )
    out = ts.shape(b, np.array([1.0, -1.0]), tok, "ucas")
    s = 0.5 / (np.sqrt(0.5) + 1e-6)
    pos, neg = np.exp(-0.25 * s), -np.exp(0.35 * -s)
    want = [pos, pos - 0.05 * 0.5, neg - 0.05 * 0.25, neg - 0.05 * 1.0]
    np.testing.assert_allclose(out, want, rtol=1e-5)


def test_ucas_clamps_positive_and_penalizes_zero():
    b = one_step_batch(2)
    tok = ts.TokenBatch(
        step=np.array([0, 1, 1]),
        self_certainty=np.zeros(3),
        token_logit=np.array([0.0, 10.0, 5.0]),
    )
    # a tiny positive advantage cannot be pushed below 0 by the logit penalty
    out = ts.shape(b, np.array([0.01, 0.0]), tok, "ucas", penalty=1.0)
    assert out[0] == pytest.approx(0.01)
    # the zero advantage gets the penalty (as in the reference code) unless turned off
    assert out[1] == pytest.approx(-1.0) and out[2] == pytest.approx(-0.5)
    off = ts.shape(b, np.array([0.01, 0.0]), tok, "ucas", penalty=1.0, penalize_nonpositive=False)
    assert (off[1:] == 0).all()


def test_less_hand_computed():
    # three one-step rollouts of one task: 0 and 1 succeeded, 2 failed; entropy threshold 0.5,
    # min_len 2.  Low-entropy runs: step0 ids [7, 8] (tokens 0-1) and [9, 9] (tokens 3-4);
    # step1 [7, 8]; step2 [7, 8] and [5, 6].
    # [7, 8]: in successes and in the failure -> neutralised (0)
    # [9, 9]: only in a success -> amplified 1.2x;  [5, 6]: only in the failure -> 1.2x
    b = one_step_batch(3, success=[1, 1, 0])
    step = np.array([0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2])
    ent = np.array([0.1, 0.1, 0.9, 0.1, 0.1, 0.1, 0.1, 0.9, 0.1, 0.1, 0.9, 0.1, 0.1])
    ids = np.array([7, 8, 1, 9, 9, 7, 8, 2, 7, 8, 3, 5, 6])
    tok = ts.TokenBatch(step=step, entropy=ent, token_id=ids)
    A = np.array([1.0, 0.5, -1.0])
    out = ts.shape(b, A, tok, "less", entropy_threshold=0.5, min_len=2)
    want = [0, 0, 1, 1.2, 1.2, 0, 0, 0.5, 0, 0, -1, -1.2, -1.2]
    np.testing.assert_allclose(out, want, rtol=1e-6)
    # order matters inside a segment: [8, 7] is a different segment from [7, 8]
    ids2 = ids.copy()
    ids2[[8, 9]] = [8, 7]
    out2 = ts.shape(b, A, ts.TokenBatch(step=step, entropy=ent, token_id=ids2), "less",
                    entropy_threshold=0.5, min_len=2)  # fmt: skip
    np.testing.assert_allclose(out2[[0, 1, 8, 9]], [1.2, 1.2, -1.2, -1.2], rtol=1e-6)


def test_redistribution_hand_computed():
    # one step, A = 2, two tokens with scores sign(A) * gap = [ln 3, 0] -> softmax [.75, .25] * 2
    # = [1.5, .5]; budget .5 -> A * [.5 + .75, .5 + .25] = [2.5, 1.5]
    b = one_step_batch(1)
    tok = ts.TokenBatch(
        step=np.array([0, 0]), logprob=np.zeros(2), teacher_logprob=np.array([np.log(3), 0.0])
    )
    np.testing.assert_allclose(ts.shape(b, np.array([2.0]), tok, "stepopsd"), [2.5, 1.5], rtol=1e-6)
    # negative advantage: the token the teacher rejects more takes more of the blame
    np.testing.assert_allclose(
        ts.shape(b, np.array([-2.0]), tok, "stepopsd"), [-1.5, -2.5], rtol=1e-6
    )
    prog = ts.TokenBatch(step=np.array([0, 0]), logprob=np.array([np.log(3), 0.0]),
                         ref_logprob=np.zeros(2))  # fmt: skip
    np.testing.assert_allclose(ts.shape(b, np.array([2.0]), prog, "progress"), [2.5, 1.5])


def test_errors_name_the_problem():
    b = one_step_batch(1)
    tok = ts.TokenBatch(step=np.array([0]))
    with pytest.raises(ValueError, match="'self_certainty'"):
        ts.shape(b, np.array([1.0]), tok, "ucas")
    with pytest.raises(KeyError, match="valid: less, progress, stepopsd, ucas"):
        ts.shape(b, np.array([1.0]), tok, "nope")
    with pytest.raises(TypeError, match="'beta'.*valid"):
        ts.shape(b, np.array([1.0]), tok, "ucas", beta=1.0)
    with pytest.raises(ValueError, match="outside"):
        ts.shape(b, np.array([1.0]), ts.TokenBatch(step=np.array([3])), "less")
    with pytest.raises(ValueError, match="entropy has shape"):
        ts.TokenBatch(step=np.array([0, 0]), entropy=np.zeros(3))
    assert ts.needs("progress") == {"logprob", "ref_logprob"}


# -- properties -----------------------------------------------------------------------------


@st.composite
def shaped_inputs(draw):
    n_steps = draw(st.integers(1, 6))
    groups = [draw(st.integers(0, 1)) for _ in range(n_steps)]
    success = [draw(st.booleans()) for _ in range(n_steps)]
    A = np.array([draw(st.sampled_from([0.0, 1.0, -1.0, 0.3, -2.5, 1e4])) for _ in groups])
    lens = [draw(st.integers(1, 6)) for _ in groups]
    step = np.repeat(np.arange(n_steps), lens)
    n = len(step)

    def col(lo, hi):
        return np.array([draw(st.floats(lo, hi)) for _ in range(n)])

    tok = ts.TokenBatch(
        step=step,
        logprob=col(-20, 0),
        ref_logprob=col(-20, 0),
        teacher_logprob=col(-20, 0),
        entropy=col(0, 3),
        self_certainty=col(0, 50),
        token_logit=col(-30, 30),
        token_id=np.array([draw(st.integers(0, 3)) for _ in range(n)]),
    )
    return one_step_batch(n_steps, groups, success), A, tok


SETTINGS = dict(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAMES = ["ucas", "less", "progress", "stepopsd"]


@settings(**SETTINGS)
@given(x=shaped_inputs())
def test_finite_and_sign_preserving(x):
    b, A, tok = x
    for name in NAMES:
        out = ts.shape(b, A, tok, name)
        assert np.isfinite(out).all()
        a = A[tok.step]
        # no shaper turns a positive step advantage negative, nor a negative one positive
        assert (out[a > 0] >= 0).all() and (out[a < 0] <= 0).all()
        if name != "ucas":  # zero in, zero out (UCAS penalises zero advantages, as its code does)
            assert (out[a == 0] == 0).all()


@settings(**SETTINGS)
@given(x=shaped_inputs())
def test_redistribution_keeps_the_step_budget(x):
    b, A, tok = x
    for name in ("progress", "stepopsd"):
        out = ts.shape(b, A, tok, name).astype(np.float64)
        sums = np.bincount(tok.step, weights=out, minlength=len(b))
        cnt = np.bincount(tok.step, minlength=len(b))
        np.testing.assert_allclose(sums, A * cnt, rtol=1e-5, atol=1e-3)


@settings(**SETTINGS)
@given(x=shaped_inputs(), data=st.data())
def test_step_order_independent(x, data):
    b, A, tok = x
    perm = np.array(data.draw(st.permutations(range(len(b)))))  # new row k = old row perm[k]
    inv = np.argsort(perm)
    b2 = b.take(perm)
    # token blocks follow their steps into the new order
    order = np.concatenate([np.flatnonzero(tok.step == perm[k]) for k in range(len(b))])
    fields = {
        f: getattr(tok, f)[order]
        for f in ("logprob", "ref_logprob", "teacher_logprob", "entropy", "self_certainty")
    }
    tok2 = ts.TokenBatch(
        step=inv[tok.step[order]],
        token_logit=tok.token_logit[order],
        token_id=tok.token_id[order],
        **fields,
    )
    for name in NAMES:
        out1 = ts.shape(b, A, tok, name)
        out2 = ts.shape(b2, A[perm], tok2, name)
        np.testing.assert_allclose(out2, out1[order], rtol=1e-5, atol=1e-5)


@settings(**SETTINGS)
@given(x=shaped_inputs(), data=st.data())
def test_keeps_zero_shapers_ignore_the_signals_of_zero_advantage_steps(x, data):
    """What lets the trainer skip their extra forward pass on steps with a zero advantage."""
    b, A, tok = x
    A = A.copy()
    A[::2] = 0.0
    zero = A[tok.step] == 0
    noise = np.asarray(
        data.draw(st.lists(st.floats(-50, 50), min_size=len(zero), max_size=len(zero)))
    )
    assert [n for n in NAMES if ts.keeps_zero(n)] == ["progress", "stepopsd"]
    for name in NAMES:
        if not ts.keeps_zero(name):
            continue
        changed = {f: np.where(zero, noise, getattr(tok, f)) for f in ts.needs(name)}
        tok2 = ts.TokenBatch(
            **{**{f.name: getattr(tok, f.name) for f in dataclasses.fields(tok)}, **changed}
        )
        np.testing.assert_array_equal(ts.shape(b, A, tok2, name), ts.shape(b, A, tok, name))
        assert (ts.shape(b, A, tok, name)[zero] == 0).all()
