"""``scripts/gpu_check.sh --cpu``: the GPU check's every phase at tiny shapes, so the script that
waits for a device cannot rot; and its report fails a run whose checks fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT),
            "OMP_NUM_THREADS": "1", **extra}  # fmt: skip


def test_gpu_check_runs_on_cpu_end_to_end(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    proc = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--cpu", "--out", str(out), "--work", str(work)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=_env(),
    )  # fmt: skip
    log = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, log
    res = json.loads((out / "gpu_check.json").read_text())
    assert (out / "gpu_check.log").stat().st_size > 0
    assert res["ok"] and res["mode"] == "cpu" and res["device"]["device"] == "cpu", log
    expected = {"install", "info", "model", "train", "resume", "bench_tiny"}
    assert {n for n, p in res["phases"].items() if p["status"] == "ok"} >= expected
    assert all(res["checks"].values()) and set(res["checks"]) >= expected
    # the end-to-end run: 2 iterations, then 1 more resumed from its checkpoint under torchrun
    model, train, resume = res["e2e"]["model"], res["e2e"]["train"], res["e2e"]["resume"]
    assert model["vocab_size"] == 151936 > model["tokenizer_tokens"]  # rows beyond the tokenizer
    assert train["iterations"] == [1, 2] and train["losses_finite"] and train["checkpoint"]
    assert train["summary_written"] and train["final_model"]
    assert resume["resume_announced"] and resume["resumed_from_iteration"] == 2
    assert resume["all_iterations"] == [1, 2, 3] and resume["resumed_iterations"] == 1
    assert resume["losses_finite"] and resume["checkpoint"].endswith("iter_000003")
    for run in (train, resume):
        split = run["seconds_per_iteration"]
        assert all(split[k] > 0 for k in ("rollout", "credit", "update", "iteration"))
        assert run["per_iteration"][0]["agent_steps"] > 0
    bench = res["bench"]["tiny"]
    assert bench["rollout_tokens"] == 4 * 4 and bench["update_tokens"] == 4 * (16 + 4)
    assert bench["update_tokens_per_s"] > 0 and bench["gradient_checkpointing"]
    assert bench["mfu"] is None  # a GPU's peak says nothing about a CPU
    assert res["pytest_gpu"]["status"] in ("ok", "none")


def test_gpu_check_report_fails_a_run_with_a_non_finite_loss(tmp_path):
    """The report's checks can fail: a NaN loss, a missing checkpoint, a timed-out phase."""
    work = tmp_path / "work"
    run = work / "runs" / "train"
    run.mkdir(parents=True)
    rows = [
        {"iteration": i, "phase": "train", "loss/loss": v, "time/rollout_s": 1.0,
         "time/credit_s": 0.1, "time/update_s": 2.0, "time/iteration_s": 3.1}
        for i, v in ((1, 0.5), (2, float("nan")))
    ]  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (work / "phases.tsv").write_text("train\t0\t5.0\t100\nbench_tiny\t124\t60.0\t60\n")
    dest = tmp_path / "gpu_check.json"
    proc = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "report", str(work), str(dest), "--mode", "cpu",
         "--train-iterations", "2", "--resume-iterations", "1", "--shapes", "tiny",
         "--budget-s", "480", "--started", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=_env(),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    res = json.loads(dest.read_text())
    assert not res["ok"] and res["checks"] == {"train": False, "bench_tiny": False}
    assert res["e2e"]["train"]["iterations"] == [1, 2]
    assert not res["e2e"]["train"]["losses_finite"] and res["e2e"]["train"]["checkpoint"] is None
    assert res["phases"]["bench_tiny"]["status"] == "timeout"
