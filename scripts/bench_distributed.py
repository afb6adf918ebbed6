"""Data-parallel scaling on this machine: ``python -m agentrl.train`` in 1 process and under
``torchrun --nproc_per_node=N``, same config, agent steps per second and time per iteration.

Each run trains ``--iterations`` iterations (no held-out evaluation, no plots) and the figures
come from its ``metrics.jsonl``: ``train/agent_steps`` and ``time/iteration_s`` (under torchrun
the slowest rank's wall time; the counts are global). The first iteration is left out as a
warm-up when there are more than one. CPU figures on a shared machine are noisy: the load
average before and after each run is printed with it.

    python scripts/bench_distributed.py --env sokoban --iterations 3
    python scripts/bench_distributed.py --env alfworld --iterations 3 -- \\
        rollout.tasks_per_iter=4 rollout.group_size=4 env.max_steps=20

Arguments after ``--`` are passed to every run as config overrides.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ENVS = {
    "sokoban": ["env=sokoban"],
    # generated games (a few per task type, made once and cached); the tiny model reads the
    # observation only
    "alfworld": [
        "env=alfworld",
        "env.kwargs.generated.train=4",
        "env.kwargs.generated.valid_seen=1",
        "env.kwargs.generated.valid_unseen=1",
    ],
}


def run(nproc: int, overrides: list[str], out: Path, timeout: float) -> dict:
    launcher = (
        [sys.executable]
        if nproc == 1
        else [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={nproc}",
        ]  # fmt: skip
    )
    quiet = [
        "trainer.progress=false",
        "trainer.loggers=[]",
        "trainer.plot=false",
        "trainer.eval_initial=false",
        "trainer.eval_every=0",
        "env.eval_episodes=1",
        f"output_dir={out}",
    ]
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [*launcher, "-m", "agentrl.train", *overrides, *quiet],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )
    total = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{nproc} process(es) failed:\n{proc.stderr[-3000:]}")
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["phase"] == "train"]
    timed = train[1:] if len(train) > 1 else train
    steps = sum(r["train/agent_steps"] for r in timed)
    wall = sum(r["time/iteration_s"] for r in timed)
    return {
        "processes": nproc,
        "iterations_timed": len(timed),
        "agent_steps_per_s": steps / wall,
        "iteration_s": wall / len(timed),
        "rollout_s": sum(r["time/rollout_s"] for r in timed) / len(timed),
        "update_s": sum(r["time/update_s"] for r in timed) / len(timed),
        "agent_steps_per_iteration": steps / len(timed),
        "train_success": [r["train/success_rate"] for r in train],
        "run_wall_s": total,
        "load_before": load0,
        "load_after": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> list[dict]:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--env", choices=sorted(ENVS), default="sokoban")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--nprocs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--timeout", type=float, default=3600)
    a = ap.parse_args(argv)
    overrides = [*ENVS[a.env], f"trainer.iterations={a.iterations}", *extra]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in a.nprocs:
            res = run(n, overrides, Path(tmp) / f"n{n}", a.timeout)
            results.append(res)
            print(json.dumps({"env": a.env, **res}), flush=True)
    base = results[0]
    for res in results[1:]:
        print(
            f"{a.env}: {res['processes']} processes vs {base['processes']}: "
            f"agent steps/s x{res['agent_steps_per_s'] / base['agent_steps_per_s']:.2f}, "
            f"time per iteration x{res['iteration_s'] / base['iteration_s']:.2f}"
        )
    return results


if __name__ == "__main__":
    main()
