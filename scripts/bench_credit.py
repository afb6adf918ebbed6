"""Benchmark every credit module on realistic step batches of about 10k, 40k and 160k steps.

    python scripts/bench_credit.py                         # all modules, 10k / 40k / 160k steps
    python scripts/bench_credit.py --reference ~/verl-agent  # + verl-agent's GiGPO on the same batch

Runs on one core (BLAS threads pinned to 1 before numpy loads). Each timing is the best of
``--repeats`` calls, each on a *fresh* batch object, so it includes everything a training step
pays for: factorising the state and action keys, discounting, grouping, normalising, diagnostics.
Building the StepBatch itself (validation) is timed separately. Times are CPU time of the process
(``time.process_time``: with one thread, the time on one core), which other jobs on a shared
machine do not inflate; wall-clock times are printed beside them.

Targets: every module under 50 ms at ~40k steps except bipace (under 1 s with
1,536-dimensional embeddings); cost linear in the number of steps; gigpo at least 20x faster than
the reference implementation on the same batch. ``--reference DIR`` points at a checkout of
verl-agent (github.com/langfengQ/verl-agent, or a fork at the HGPO recipe); its
``gigpo/core_gigpo.py`` is loaded from there (never copied here) with a stub for the one ``verl``
import it does not use, and needs torch.
"""

from __future__ import annotations

# ruff: noqa: E402 - the thread variables must be set before numpy is imported
import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse
import contextlib
import dataclasses
import importlib.util
import io
import platform
import sys
import time
import types
from pathlib import Path

import numpy as np
from agentrl.credit.synthetic import random_batch

from agentrl import credit

# Groups of 8 rollouts of up to 50 steps; 128 groups is the issue's ~40k-step batch.
SIZES = {"10k": 32, "40k": 128, "160k": 512}
SPECS: dict[str, dict] = {
    "compose": {
        "base": {"name": "grpo", "mode": "mean"},
        "terms": [{"name": "gigpo"}, {"name": "milestone", "weight": 0.5}],
    },
}
BUDGET_MS = {"bipace": 1000.0}


def make(n_groups: int, seed: int, dim: int = 0):
    # 200 states per task with the goal rarely reached: most episodes run the full 50 steps.
    return random_batch(n_groups, 8, 50, n_states=200, embedding_dim=dim, seed=seed)


WALL: dict[tuple[str, int], float] = {}


def time_module(name: str, n_groups: int, repeats: int, dim: int) -> tuple[float, int]:
    """Best CPU ms over fresh batches (best wall ms kept in WALL), and the batch size."""
    best = wall = np.inf
    n = 0
    for r in range(repeats):
        b = make(n_groups, seed=r, dim=dim if name == "bipace" else 0)
        n = len(b)
        t0, c0 = time.perf_counter(), time.process_time()
        credit.compute(b, name, **SPECS.get(name, {}))
        best = min(best, time.process_time() - c0)
        wall = min(wall, time.perf_counter() - t0)
        del b
    WALL[(name, n_groups)] = wall * 1e3
    return best * 1e3, n


def time_batch_build(n_groups: int, repeats: int) -> float:
    b = make(n_groups, seed=0)
    cols = {f.name: getattr(b, f.name) for f in dataclasses.fields(b)}
    best = np.inf
    for _ in range(repeats):
        c0 = time.process_time()
        credit.StepBatch(**cols)
        best = min(best, time.process_time() - c0)
    return best * 1e3


def load_reference(root: Path):
    path = root / "gigpo" / "core_gigpo.py"
    if not path.exists():
        raise SystemExit(f"--reference: {path} not found (point it at a verl-agent checkout)")
    verl = types.ModuleType("verl")
    verl.DataProto = object  # only used in type hints of functions we do not call
    sys.modules.setdefault("verl", verl)
    spec = importlib.util.spec_from_file_location("reference_core_gigpo", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def reference_gigpo_ms(root: Path, n_groups: int, repeats: int) -> tuple[float, float, int]:
    """(reference ms, ours ms, steps): GiGPO's advantage on one batch, same inputs, mean_std mode."""
    import torch

    torch.set_num_threads(1)
    ref = load_reference(root)
    b = make(n_groups, seed=0)
    n = len(b)
    L = 8  # response tokens per step: the reference works on (steps, tokens) tensors
    score = torch.tensor((b.episode_return[b.traj_index] - 0.1 * (~b.valid)).astype(np.float32))
    tlr = torch.zeros(n, L)
    tlr[:, -1] = score
    step_rewards = torch.tensor((b.discounted_returns(0.95) - 0.1 * (~b.valid)).astype(np.float32))
    mask = torch.ones(n, L)
    index = np.array([f"g{g}" for g in b.group], dtype=object)
    traj = np.array([f"t{t}" for t in b.traj], dtype=object)
    best_ref = np.inf
    for _ in range(max(1, repeats // 2)):
        with contextlib.redirect_stdout(io.StringIO()):
            c0 = time.process_time()
            out, _ = ref.compute_gigpo_outcome_advantage(
                tlr, step_rewards, mask, b.state_key, index, traj, mode="mean_std_norm"
            )
            best_ref = min(best_ref, time.process_time() - c0)
    ours_ms, _ = time_module("gigpo", n_groups, repeats, 0)
    res = credit.compute(make(n_groups, seed=0), "gigpo")
    diff = np.abs(out[:, 0].numpy() - res.advantages)
    bad = diff > 1e-4
    size = np.bincount(b.anchor_index)[b.anchor_index]
    tied = bad & (res.components["step"] == 0) & (size >= 2)  # anchor groups of identical returns
    print(
        f"  same batch: {bad.sum()} of {n} rows differ by more than 1e-4 (max {diff.max():.1e}), "
        f"{tied.sum()} of them in anchor groups whose returns are all equal, where the reference's "
        f"float32 mean leaves a residue that std normalisation amplifies; elsewhere max "
        f"{diff[~tied].max():.1e}"
    )
    return best_ref * 1e3, ours_ms, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    ap.add_argument("--modules", nargs="+", default=credit.available())
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dim", type=int, default=1536, help="embedding size for bipace")
    ap.add_argument(
        "--reference", type=Path, help="verl-agent checkout: time its GiGPO on the 40k batch"
    )
    args = ap.parse_args()

    print(
        f"credit benchmark: {platform.processor() or platform.machine()}, Python {platform.python_version()}, numpy {np.__version__}, 1 BLAS thread"
    )
    print(
        f"CPU ms, best of {args.repeats}, fresh batch per call; bipace with {args.dim}-dim float32 embeddings\n"
    )
    times: dict[str, dict[str, tuple[float, int]]] = {}
    print(
        f"{'module':<10}"
        + "".join(f"{s + ' (ms)':>14}" for s in args.sizes)
        + f"{'us/step':>10}{'40k budget':>12}{'160k/10k per step':>19}"
    )
    for name in args.modules:
        times[name] = {s: time_module(name, SIZES[s], args.repeats, args.dim) for s in args.sizes}
        row = f"{name:<10}" + "".join(f"{times[name][s][0]:>14.1f}" for s in args.sizes)
        ref_size = "40k" if "40k" in times[name] else args.sizes[-1]
        ms, n = times[name][ref_size]
        row += f"{ms * 1e3 / n:>10.2f}"
        budget = BUDGET_MS.get(name, 50.0)
        row += f"{ms / budget:>11.2f}x" if ref_size == "40k" else f"{'':>12}"
        if "10k" in times[name] and "160k" in times[name]:
            (a, na), (c, nc) = times[name]["10k"], times[name]["160k"]
            row += f"{(c / nc) / (a / na):>19.2f}"
        print(row + "   wall ms: " + ", ".join(f"{WALL[(name, SIZES[s])]:.1f}" for s in args.sizes))
    steps = {s: times[args.modules[0]][s][1] for s in args.sizes}
    print("\nsteps per batch: " + ", ".join(f"{s} = {n}" for s, n in steps.items()))
    print(
        "40k budget: time / budget (50 ms, bipace 1 s); below 1.00x meets it. "
        "160k/10k per step: cost per step at 160k over cost per step at 10k (1.0 = linear)."
    )
    for s in args.sizes:
        print(
            f"StepBatch construction and validation at {s}: {time_batch_build(SIZES[s], args.repeats):.1f} ms"
        )
    if args.reference:
        ref_ms, ours_ms, n = reference_gigpo_ms(args.reference, SIZES["40k"], args.repeats)
        print(
            f"gigpo vs verl-agent reference on the same {n}-step batch: reference {ref_ms:.0f} ms, "
            f"ours {ours_ms:.1f} ms: {ref_ms / ours_ms:.0f}x faster"
        )


if __name__ == "__main__":
    main()
