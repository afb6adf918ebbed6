"""agentrl.evaluation.multiseed: bootstrap intervals, differences of means, run folders, targets (hand-computed)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.evaluation.multiseed import (
    SEED_SETS,
    Evaluation,
    RunResult,
    bootstrap_diff_ci,
    bootstrap_mean_ci,
    bootstrap_paired_diff_ci,
    mean_curve,
    parse_seeds,
    read_run,
    summarize_runs,
    targets,
)


def run(seed, rates, n=200, iters=(0, 25, 50, 75, 100), cpu=300.0):
    phases = ["eval_initial"] + ["eval"] * (len(rates) - 2) + ["eval_final"]
    evals = [
        Evaluation(it, round(r * n), n, ph) for it, r, ph in zip(iters, rates, phases, strict=True)
    ]
    return RunResult(seed, evals, cpu_s=cpu)


def test_mean_ci_of_a_constant_is_the_constant():
    assert bootstrap_mean_ci([0.4, 0.4, 0.4]) == pytest.approx((0.4, 0.4, 0.4))


def test_mean_ci_two_values():
    # Resampled means of [0, 1]: 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4 -> 95 % CI [0, 1].
    m, lo, hi = bootstrap_mean_ci([0.0, 1.0])
    assert (m, lo, hi) == (0.5, 0.0, 1.0)


def test_mean_ci_binomial_quantiles():
    # Means of 4 draws from [0, 0, 0, 1] are k/4 with k ~ Binomial(4, 1/4):
    # P(k=0) = 0.316 > 2.5 % -> low 0; P(k<=2) = 0.949 < 97.5 % <= P(k<=3) = 0.996 -> high 0.75.
    m, lo, hi = bootstrap_mean_ci([0.0, 0.0, 0.0, 1.0], n_boot=20_000)
    assert m == 0.25 and lo == 0.0 and hi == 0.75


def test_diff_of_means_hand_computed():
    assert bootstrap_diff_ci([1.0, 1.0], [0.0, 0.0]) == (1.0, 1.0, 1.0)
    # b is constant, so the difference is distributed as the mean of a: [-0.5, 0.5] -> CI [-0.5, 0.5].
    d, lo, hi = bootstrap_diff_ci([0.0, 1.0], [0.5, 0.5, 0.5])
    assert (d, lo, hi) == (0.0, -0.5, 0.5)


def test_paired_diff_hand_computed():
    # Every pair differs by +0.1: each resample's mean difference is 0.1, so the CI is a point,
    # while the unpaired interval sees the seeds' spread (0.2 to 0.9) and is wide.
    a, b = [0.3, 0.6, 1.0], [0.2, 0.5, 0.9]
    d, lo, hi = bootstrap_paired_diff_ci(a, b)
    assert d == pytest.approx(0.1) and lo == pytest.approx(0.1) and hi == pytest.approx(0.1)
    _, ulo, uhi = bootstrap_diff_ci(a, b)
    assert ulo < 0.0 < uhi
    # Differences [0, 1]: resampled means are 0, 0.5 or 1 with P = 1/4, 1/2, 1/4 -> CI [0, 1].
    assert bootstrap_paired_diff_ci([0.5, 1.0], [0.5, 0.0]) == (0.5, 0.0, 1.0)
    with pytest.raises(ValueError, match="equal lengths"):
        bootstrap_paired_diff_ci([0.1, 0.2], [0.1])


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="non-empty"):
        bootstrap_mean_ci([])
    with pytest.raises(ValueError, match="finite"):
        bootstrap_mean_ci([0.1, float("nan")])
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_mean_ci([0.1, 0.2], confidence=1.5)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=8), st.floats(-1, 1))
def test_ci_contains_mean_within_range_and_shifts(values, shift):
    m, lo, hi = bootstrap_mean_ci(values, n_boot=2000)
    assert min(values) - 1e-12 <= lo <= hi <= max(values) + 1e-12
    m2, lo2, hi2 = bootstrap_mean_ci([v + shift for v in values], n_boot=2000)
    assert (m2, lo2, hi2) == pytest.approx((m + shift, lo + shift, hi + shift), abs=1e-9)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.floats(0, 1), min_size=1, max_size=6),
    st.lists(st.floats(0, 1), min_size=1, max_size=6),
)
def test_diff_is_antisymmetric_in_its_point_estimate(a, b):
    d1, lo1, hi1 = bootstrap_diff_ci(a, b, n_boot=2000)
    d2, _, _ = bootstrap_diff_ci(b, a, n_boot=2000)
    assert d1 == pytest.approx(-d2)
    assert lo1 <= hi1


def test_run_result_properties():
    r = run(0, [0.03, 0.2, 0.7, 0.65, 0.55])
    assert r.initial.rate == 0.03 and r.final.rate == 0.55
    assert r.best.iteration == 50
    assert r.improvement_points() == pytest.approx(52.0)
    assert r.drop_from_best_points() == pytest.approx(15.0)
    assert r.disjoint()
    close = run(1, [0.10, 0.1, 0.1, 0.1, 0.15])
    assert not close.disjoint()  # 20/200 vs 30/200: the Wilson intervals overlap


def test_summary_and_targets():
    runs = [
        run(0, [0.03, 0.3, 0.6, 0.7, 0.7]),
        run(1, [0.03, 0.2, 0.5, 0.6, 0.65]),
        run(2, [0.03, 0.1, 0.4, 0.55, 0.50], cpu=700.0),
    ]
    s = summarize_runs(runs, n_boot=2000)
    assert s["final"]["mean"] == pytest.approx((0.7 + 0.65 + 0.5) / 3)
    assert s["final"]["min"] == 0.5 and s["final"]["max"] == 0.7
    assert s["initial"]["mean"] == pytest.approx(0.03)
    assert s["drop_from_best_points"]["max"] == pytest.approx(5.0)
    assert s["cpu_min"]["max"] == pytest.approx(700 / 60)
    t = targets(runs)
    assert list(t.values()) == [True, True, True, False]  # the 11.7-minute run fails the CPU check
    t2 = targets(runs, min_mean_final=0.7)
    assert t2["mean final >= 70 %"] is False
    assert "every final >= 65 %" not in t2  # off unless asked for
    t3 = targets(runs, min_seed_final=0.5)
    assert t3["every final >= 50 %"] is True  # 0.50 is at the bar, not below it
    assert targets(runs, min_seed_final=0.65)["every final >= 65 %"] is False


def test_mean_curve_uses_common_iterations():
    a = run(0, [0.0, 0.5, 1.0], iters=(0, 10, 20))
    b = run(1, [0.0, 0.3, 0.5], iters=(0, 10, 30))
    curve = mean_curve([a, b], n_boot=1000)
    assert [c[0] for c in curve] == [0, 10]
    assert curve[1][1] == pytest.approx(0.4)


def test_read_run(tmp_path):
    rows = [
        {
            "iteration": 0,
            "phase": "eval_initial",
            "eval/episodes": 200.0,
            "eval/success_rate": 0.03,
        },
        {
            "iteration": 1,
            "phase": "train",
            "cpu/rollout_s": 0.5,
            "cpu/credit_s": 0.01,
            "cpu/update_s": 3.0,
            "time/iteration_s": 4.0,
        },
        {
            "iteration": 2,
            "phase": "train",
            "cpu/rollout_s": 0.5,
            "cpu/credit_s": 0.01,
            "cpu/update_s": 3.0,
            "time/iteration_s": 2.5,
        },
        {"iteration": 2, "phase": "eval_final", "eval/episodes": 200.0, "eval/success_rate": 0.545},
        {"iteration": 2, "phase": "summary", "final_success_rate": 0.545},
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    r = read_run(tmp_path, seed=3, cpu_s=12.0)
    assert [(e.iteration, e.successes, e.phase) for e in r.evals] == [
        (0, 6, "eval_initial"),
        (2, 109, "eval_final"),
    ]
    assert r.iterations == 2 and r.train_cpu_s == pytest.approx(7.02) and r.cpu_s == 12.0
    # training wall seconds up to each iteration's end (evaluations not counted): 4.0 + 2.5
    assert r.extra["train_wall_at"] == {0: 0.0, 1: 4.0, 2: 6.5}
    lo, hi = r.final.ci()
    assert lo == pytest.approx(0.476, abs=1e-3) and hi == pytest.approx(0.613, abs=1e-3)


def test_read_run_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        read_run(tmp_path, 0)
    (tmp_path / "metrics.jsonl").write_text('{"phase": "train", "iteration": 1}\nnot json\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: not JSON"):
        read_run(tmp_path, 0)
    (tmp_path / "metrics.jsonl").write_text('{"phase": "eval", "iteration": 1}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:1: evaluation row without"):
        read_run(tmp_path, 0)


def test_bootstrap_is_reproducible():
    x = np.linspace(0, 1, 5)
    assert bootstrap_mean_ci(x, seed=7) == bootstrap_mean_ci(x, seed=7)


def test_seed_sets_counts_and_lists():
    assert parse_seeds("report") == list(range(1000, 1010))
    assert parse_seeds("tuning") == list(range(10))
    assert parse_seeds("report:3") == [1000, 1001, 1002]
    assert parse_seeds("3", start=7) == [7, 8, 9]
    assert parse_seeds("1000-1002,1007") == [1000, 1001, 1002, 1007]
    assert not set(SEED_SETS["report"]) & set(SEED_SETS["tuning"])  # reporting never tunes
    for bad, why in [
        ("0", "at least one"),
        ("report:11", "has 10 seeds"),
        ("report:x", "has 10 seeds"),
        ("5-3", "is empty"),
        ("1,1", "twice"),
        ("reprot", "expected a count"),
        ("", "expected a count"),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_seeds(bad)
