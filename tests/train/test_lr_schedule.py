"""Learning-rate schedules (hand-computed factors) and the learner applying them per update."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrl.learner import Learner, LearnerConfig, StepSequence
from agentrl.learner.schedule import LRSchedule, lr_factor


def test_constant_and_warmup():
    assert [lr_factor(u) for u in range(3)] == [1.0, 1.0, 1.0]
    assert [lr_factor(u, warmup=3) for u in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]


def test_linear_and_cosine_by_hand():
    assert [lr_factor(u, "linear", total=4) for u in range(6)] == [1.0, 0.75, 0.5, 0.25, 0.0, 0.0]
    assert lr_factor(2, "linear", total=4, min_ratio=0.2) == pytest.approx(0.6)
    assert lr_factor(1, "cosine", total=4) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    # warm-up, then decay over the remaining updates
    assert [lr_factor(u, "linear", warmup=1, total=3) for u in range(4)] == [0.5, 1.0, 0.5, 0.0]


def test_bad_schedule_fails_when_made():
    with pytest.raises(ValueError, match="needs total"):
        LRSchedule("cosine")
    assert LRSchedule().is_constant and not LRSchedule(warmup=2).is_constant


def test_bad_schedules_are_named():
    with pytest.raises(ValueError, match="lr schedule must be one of"):
        lr_factor(0, "step")
    with pytest.raises(ValueError, match="needs total > warmup"):
        lr_factor(0, "linear")
    with pytest.raises(ValueError, match="min_ratio"):
        lr_factor(0, "linear", total=3, min_ratio=2.0)


@given(
    st.sampled_from(["linear", "cosine"]), st.integers(0, 5), st.integers(1, 50), st.floats(0, 1)
)
def test_decay_is_monotone_and_bounded(schedule, warmup, span, min_ratio):
    total = warmup + span
    f = [
        lr_factor(u, schedule, warmup=warmup, total=total, min_ratio=min_ratio)
        for u in range(total + 3)
    ]
    after = f[warmup:]
    assert all(a >= b - 1e-12 for a, b in zip(after, after[1:], strict=False))
    assert all(min_ratio - 1e-12 <= x <= 1.0 + 1e-12 for x in after)
    assert all(0.0 < x < 1.0 for x in f[:warmup])
    assert f[-1] == pytest.approx(min_ratio)


def test_learner_sets_the_scheduled_lr_each_update(tiny):
    model, tok = tiny
    cfg = LearnerConfig(lr=1e-3, minibatch_size=4, micro_batch_size=4)
    sched = LRSchedule("linear", total=4)
    learner = Learner(model, cfg, tok.pad_token_id, lr_schedule=sched)
    seqs = [StepSequence([5, 6, 7], [8, 9], [-1.0, -1.0], i) for i in range(4)]
    adv = np.array([1.0, -1.0, 0.5, -0.5])
    lrs = [learner.update(seqs, adv, seed=u)["lr"] for u in range(5)]
    assert lrs == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4, 0.0])
    # A learner restored from the state after 2 updates continues the schedule (base rate kept).
    fresh = Learner(model, cfg, tok.pad_token_id, lr_schedule=sched)
    first = fresh.update(seqs, adv, seed=0)["lr"]
    fresh.update(seqs, adv, seed=1)
    resumed = Learner(model, cfg, tok.pad_token_id, lr_schedule=sched)
    resumed.load_state_dict(fresh.state_dict())
    assert first == pytest.approx(1e-3)
    assert resumed.update(seqs, adv, seed=2)["lr"] == pytest.approx(5e-4)


def test_entropy_bonus_follows_its_schedule(tiny):
    # The entropy weight of update u is entropy_coef x the schedule's factor (linear over 4
    # updates: 0.1, 0.075, 0.05, 0.025, then 0); a constant schedule reports no weight.
    model, tok = tiny
    cfg = LearnerConfig(lr=1e-4, minibatch_size=4, micro_batch_size=4, entropy_coef=0.1)
    seqs = [StepSequence([5, 6, 7], [8, 9], [-1.0, -1.0], i) for i in range(4)]
    adv = np.zeros(4)  # no policy gradient: the loss is -weight x entropy
    learner = Learner(model, cfg, tok.pad_token_id, entropy_schedule=LRSchedule("linear", total=4))
    out = [learner.update(seqs, adv, seed=u) for u in range(5)]
    assert [o["entropy_coef"] for o in out] == pytest.approx([0.1, 0.075, 0.05, 0.025, 0.0])
    for o in out:
        assert o["loss"] == pytest.approx(-o["entropy_coef"] * o["entropy"], rel=1e-5, abs=1e-7)
    assert "entropy_coef" not in Learner(model, cfg, tok.pad_token_id).update(seqs, adv)
