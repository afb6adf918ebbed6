"""scripts/bench_learning.py end to end at toy size: 2 seeds x 2 iterations x 2 configs."""

from __future__ import annotations

import json

from . import load_script

TOY = [
    "trainer=smoke",
    "trainer.eval_every=1",
    "rollout.tasks_per_iter=2",
    "rollout.group_size=4",
    "env.eval_episodes=6",
]


def _script():
    return load_script("bench_learning")


def test_toy_compare_end_to_end(tmp_path):
    mod = _script()
    out = tmp_path / "bench"
    argv = ["--seeds", "2", "--jobs", "2", "--out", str(out), "--check-targets"]
    argv += ["--compare", "credit=grpo", "credit=gigpo", "--", *TOY]
    assert mod.main(argv) == 0
    res = json.loads((out / "results.json").read_text())
    assert set(res["runs"]) == {"credit=grpo", "credit=gigpo"}
    for label, runs in res["runs"].items():
        assert [r["seed"] for r in runs] == [0, 1]
        for r in runs:
            # initial, after iteration 1, final after iteration 2; 6 episodes each
            assert [(e["iteration"], e["phase"]) for e in r["evals"]] == [
                (0, "eval_initial"),
                (1, "eval"),
                (2, "eval_final"),
            ]
            assert all(e["episodes"] == 6 for e in r["evals"])
            assert r["cpu_s"] > 0 and r["iterations"] == 2
            stamp = json.loads(
                (out / label.replace("=", "_") / f"seed_{r['seed']}" / "bench_run.json").read_text()
            )
            assert "trainer.num_threads=1" in stamp["cmd"] and f"seed={r['seed']}" in stamp["cmd"]
    # Same seed, same initial model and held-out set: both configs start from the same evaluation.
    a, b = res["runs"]["credit=grpo"], res["runs"]["credit=gigpo"]
    assert [r["evals"][0]["successes"] for r in a] == [r["evals"][0]["successes"] for r in b]
    (diff,) = res["differences"]
    assert diff["config"] == "credit=gigpo" and diff["base"] == "credit=grpo"
    fa = sum(r["evals"][-1]["rate"] for r in a) / 2
    fb = sum(r["evals"][-1]["rate"] for r in b) / 2
    assert abs(diff["diff"] - (fb - fa)) < 1e-9 and diff["ci_low"] <= diff["ci_high"]
    # Paired by seed: both seeds finished in both configs, and the mean of the per-seed
    # differences equals the difference of the means.
    assert diff["paired_seeds"] == [0, 1] and abs(diff["paired_diff"] - diff["diff"]) < 1e-9
    assert diff["paired_ci_low"] <= diff["paired_diff"] <= diff["paired_ci_high"]
    table = (out / "table.md").read_text()
    assert "## Per seed: `credit=gigpo`" in table and "| `credit=gigpo` |" in table
    assert "Targets" in table
    assert (out / "curves.png").stat().st_size > 10_000
    # A second call reuses the finished runs (same commands): nothing is retrained.
    mtime = (out / "credit_grpo" / "seed_0" / "metrics.jsonl").stat().st_mtime
    assert mod.main(argv) == 0
    assert (out / "credit_grpo" / "seed_0" / "metrics.jsonl").stat().st_mtime == mtime
    # The thresholds are options: an impossible CPU budget and gain fail, a lax mean passes.
    strict = [*argv[:7], "--target-cpu", "0.001", "--target-gain", "101", "--target-mean", "0"]
    assert mod.main([*strict, *argv[7:]]) == 0
    table = (out / "table.md").read_text()
    assert "every measured run <= 0.001 CPU min: FAIL" in table
    assert "every seed >= +101 points, intervals disjoint: FAIL" in table
    assert "mean final >= 0 %: pass" in table


def test_plan_names_configs_and_common_overrides():
    # printed before any run: overrides swallowed by --compare (a missing --) show up as configs
    text = _script().plan_text(["credit=grpo", "default"], ["env.kwargs.num_boxes=2"], [0, 1, 2])
    assert text.splitlines() == [
        "2 config(s) x 3 seed(s) (0-2):",
        "  1. credit=grpo",
        "  2. default",
        "common overrides: env.kwargs.num_boxes=2",
    ]
    assert _script().plan_text(["default"], [], [4]).endswith("common overrides: none")
