"""Helpers of ``scripts/gpu_check.sh``: the device report, the end-to-end model, the
summary.

- ``info OUT.json``: the device, the versions that matter and the free GPU memory;
- ``model DIR --shape S``: a random-initialised Qwen2 of a shape of ``bench_fsdp_gpu.SHAPES``
  (``qwen2.5-0.5b``: Qwen2.5-0.5B's architecture and its 151,936-row vocabulary) with the embedded
  tiny model's tokenizer and chat template, saved as a Hugging Face folder for ``model=path``
  (nothing is downloaded). The tokenizer knows 512 tokens: ids beyond it decode to nothing, so the
  run decodes constrained (``model.constrained=true``: admissible actions only), as the tiny
  default run does; a random policy then still plays valid moves and gets rewards that differ;
- ``report WORK JSON``: reads what the phases left under ``WORK`` (``phases.tsv``, the bench
  JSONs, the two run folders' ``metrics.jsonl`` and checkpoints, the phases' logs) and writes the
  summary to ``JSON``; exit 0 when every phase that ran passed its checks.

Only public entry points are used (``agentrl.models.build_tiny`` for the tokenizer; the runs are
``python -m agentrl.train`` processes started by the shell script).
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import importlib.util
import json
import math
import platform
import sys
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent

#: Packages whose versions the report records (absent ones are reported as null).
PACKAGES = [
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "peft",
    "numpy",
    "networkx",
    "gymnasium",
    "hydra-core",
    "omegaconf",
    "tensorboard",
    "matplotlib",
    "pytest",
]


def _version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


# -- info --------------------------------------------------------------------------------------
def info(out: Path) -> dict:
    import torch

    res: dict = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": {p: _version(p) for p in PACKAGES},
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "cpu_threads": torch.get_num_threads(),
    }
    res["versions"]["torch"] = torch.__version__
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        p = torch.cuda.get_device_properties(0)
        res.update(
            device=torch.cuda.get_device_name(0),
            device_count=torch.cuda.device_count(),
            capability=".".join(map(str, torch.cuda.get_device_capability(0))),
            multiprocessors=p.multi_processor_count,
            bf16=torch.cuda.is_bf16_supported(),
            memory_total_gib=total / 2**30,
            memory_free_gib=free / 2**30,
            cudnn=torch.backends.cudnn.version(),
            nccl=".".join(map(str, torch.cuda.nccl.version())),
        )
    else:
        res["device"] = "cpu"
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    return res


# -- the end-to-end model ----------------------------------------------------------------------
def build_model(out: Path, shape: str, device: str, dtype: str, vocab: int | None = None) -> dict:
    import torch
    from bench_fsdp_gpu import SHAPES  # scripts/ is on sys.path: this file runs as a script
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from agentrl.models import build_tiny

    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(build_tiny())
    spec = dict(SHAPES[shape])
    spec["vocab_size"] = max(vocab or spec["vocab_size"], len(tok))
    cfg = Qwen2Config(
        **spec, bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    with torch.device(device):  # a 0.5B init is quick on a GPU, slow on a CPU
        model = Qwen2ForCausalLM(cfg)
    model = model.to(dtype=getattr(torch, dtype)).cpu()
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    res = {
        "shape": shape,
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": spec["vocab_size"],
        "tokenizer_tokens": len(tok),
        "saved_dtype": dtype,
        "build_s": time.perf_counter() - t0,
        "path": str(out),
    }
    (out / "gpu_check_model.json").write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    return res


# -- the summary -------------------------------------------------------------------------------
def _load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _phases(work: Path) -> dict[str, dict]:
    """``phases.tsv``: name, rc (or skipped / no_time / needs:<phase>), seconds, limit."""
    phases = {}
    path = work / "phases.tsv"
    lines = path.read_text().splitlines() if path.exists() else []
    for line in lines:
        name, rc, seconds, limit = line.split("\t")
        if rc.lstrip("-").isdigit():
            code = int(rc)
            status = {0: "ok", 124: "timeout", 137: "timeout"}.get(code, "failed")
        else:
            code, status = None, rc
        phases[name] = {
            "status": status,
            "rc": code,
            "seconds": float(seconds),
            "limit_s": float(limit),
        }
    return phases


def _finite(v) -> bool:
    return isinstance(v, int | float) and math.isfinite(v)


def _rows(run: Path, phase: str = "train") -> list[dict]:
    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("phase") == phase]


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _run_summary(run: Path, iterations: list[int]) -> dict:
    """The checks and timings of a run folder's training iterations ``iterations``."""
    rows = [r for r in _rows(run) if r["iteration"] in iterations]
    loss_keys = sorted({k for r in rows for k in r if k.startswith("loss/")})
    losses = {k: [r.get(k) for r in rows] for k in loss_keys}
    finite = bool(rows) and all(
        "loss/loss" in r and all(_finite(r[k]) for k in r if k.startswith("loss/")) for r in rows
    )
    per_it = [
        {
            "iteration": r["iteration"],
            "rollout_s": r["time/rollout_s"],
            "credit_s": r["time/credit_s"],
            "update_s": r["time/update_s"],
            "iteration_s": r["time/iteration_s"],
            "agent_steps": r.get("train/agent_steps"),
            "prompt_tokens": r.get("train/prompt_tokens"),
            "response_tokens": r.get("train/response_tokens"),
        }
        for r in rows
    ]
    steady = per_it[1:] or per_it  # the first iteration carries the warm-up
    ckpt = run / "checkpoints" / f"iter_{max(iterations):06d}"
    summary = _load(run / "summary.json")
    peak = [r["mem/peak_cuda_mb"] for r in rows if "mem/peak_cuda_mb" in r]
    return {
        "iterations": [r["iteration"] for r in rows],
        "losses_finite": finite,
        "loss": losses.get("loss/loss", []),
        "losses": losses,
        "train_success_rate": [r.get("train/success_rate") for r in rows],
        "seconds_per_iteration": {
            k: _mean([p[f"{k}_s"] for p in steady])
            for k in ("rollout", "credit", "update", "iteration")
        },
        "seconds_per_iteration_note": "mean over the iterations after the first"
        if len(per_it) > 1
        else "the only iteration",
        "per_iteration": per_it,
        "peak_cuda_mb": max(peak) if peak else None,
        "checkpoint": str(ckpt) if (ckpt / "state.pt").exists() else None,
        "final_model": (run / "checkpoints" / "final").is_dir(),
        "summary_written": summary is not None,
    }


def _log(work: Path, phase: str) -> str:
    path = work / "logs" / f"{phase}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def _git_commit() -> str | None:
    import subprocess

    try:
        proc = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=SCRIPTS, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout.strip() or None


def _pytest_summary(work: Path) -> str | None:
    path = work / "logs" / "pytest_gpu.log"
    if not path.exists():
        return None
    lines = [ln.strip() for ln in path.read_text().splitlines() if ln.strip()]
    ends = [
        ln
        for ln in lines
        if " in " in ln
        and any(
            w in ln for w in ("passed", "skipped", "failed", "error", "deselected", "no tests ran")
        )
    ]
    return ends[-1].strip("= ") if ends else None


def report(
    work: Path,
    dest: Path,
    mode: str,
    train_its: int,
    resume_its: int,
    shapes: list[str],
    budget: float,
    started: float,
) -> dict:
    phases = _phases(work)
    spec = importlib.util.find_spec("agentrl")
    res: dict = {
        "issue": 30,
        "mode": mode,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "total_s": time.time() - started,
        "budget_s": budget,
        "commit": _git_commit(),
        "agentrl": spec.origin if spec else None,
        "device": _load(work / "info.json"),
        "phases": phases,
    }
    checks: dict[str, bool] = {}
    # the benchmark at each shape
    bench = {}
    for shape in shapes:
        b = _load(work / f"bench_{shape}.json")
        bench[shape] = b
        if phases.get(f"bench_{shape}", {}).get("status") in ("ok", "failed", "timeout"):
            checks[f"bench_{shape}"] = bool(
                b and b.get("rollout_tokens_per_s", 0) > 0 and _finite(b.get("loss"))
            )
    res["bench"] = bench
    # the end-to-end run and its resumption
    model = _load(work / "model" / "gpu_check_model.json")
    e2e: dict = {"model": model, "train_iterations": train_its, "resume_iterations": resume_its}
    if phases.get("train", {}).get("status") not in (None, "skipped"):
        t = _run_summary(work / "runs" / "train", list(range(1, train_its + 1)))
        t["launcher"] = "python -m agentrl.train"
        e2e["train"] = t
        checks["train"] = (
            phases["train"]["status"] == "ok"
            and t["iterations"] == list(range(1, train_its + 1))
            and t["losses_finite"]
            and t["checkpoint"] is not None
            and t["summary_written"]
        )
    if phases.get("resume", {}).get("status") not in (None, "skipped"):
        total = train_its + resume_its
        r = _run_summary(work / "runs" / "resume", list(range(train_its + 1, total + 1)))
        every = [row["iteration"] for row in _rows(work / "runs" / "resume")]
        r["launcher"] = "torchrun --nproc_per_node=1 -m agentrl.train"
        r["resumed_from_iteration"] = train_its
        r["all_iterations"] = every  # the history read from the checkpoint, then the new ones
        r["resumed_iterations"] = len(r["iterations"])
        r["resume_announced"] = (
            f"resumed from {work / 'runs' / 'train'} at iteration {train_its}"
            in (_log(work, "resume"))
        )
        e2e["resume"] = r
        checks["resume"] = (
            phases["resume"]["status"] == "ok"
            and r["resume_announced"]
            and every == list(range(1, total + 1))
            and r["resumed_iterations"] == resume_its
            and r["losses_finite"]
            and r["checkpoint"] is not None
            and r["summary_written"]
        )
    res["e2e"] = e2e
    # the GPU-marked tests
    pt = phases.get("pytest_gpu")
    if pt is not None and pt["status"] not in ("skipped", "none"):
        checks["pytest_gpu"] = pt["status"] == "ok"
    res["pytest_gpu"] = {"status": pt and pt["status"], "summary": _pytest_summary(work)}
    for name, p in phases.items():  # every phase that ran (or ran work of time) must pass
        if p["status"] not in ("skipped", "none"):
            checks.setdefault(name, p["status"] == "ok")
    res["checks"] = checks
    res["ok"] = bool(checks) and all(checks.values())
    dest.write_text(json.dumps(res, indent=1, default=str) + "\n")
    # printed without the per-key loss lists and per-iteration rows (the file has them), so the
    # whole summary fits the end of a device call's output
    short = json.loads(json.dumps(res, default=str))
    for run in (short["e2e"].get("train"), short["e2e"].get("resume")):
        for key in ("losses", "per_iteration") if run else ():
            run.pop(key)
    print(json.dumps(short, indent=1))
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("info")
    p.add_argument("out", type=Path)
    p = sub.add_parser("model")
    p.add_argument("out", type=Path)
    p.add_argument("--shape", default="qwen2.5-0.5b")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--vocab-size", type=int, default=None, help="instead of the shape's")
    p = sub.add_parser("report")
    p.add_argument("work", type=Path)
    p.add_argument("json", type=Path)
    p.add_argument("--mode", default="gpu")
    p.add_argument("--train-iterations", type=int, required=True)
    p.add_argument("--resume-iterations", type=int, required=True)
    p.add_argument("--shapes", default="")
    p.add_argument("--budget-s", type=float, required=True)
    p.add_argument("--started", type=float, required=True, help="epoch seconds")
    a = ap.parse_args(argv)
    if a.cmd == "info":
        info(a.out)
    elif a.cmd == "model":
        build_model(a.out, a.shape, a.device, a.dtype, a.vocab_size)
    else:
        res = report(
            a.work,
            a.json,
            a.mode,
            a.train_iterations,
            a.resume_iterations,
            [s for s in a.shapes.split(",") if s],
            a.budget_s,
            a.started,
        )
        return 0 if res["ok"] else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
