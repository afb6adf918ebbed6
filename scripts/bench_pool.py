"""Env pool backends side by side: worker processes vs Ray actors, in one process, same machine.

    python scripts/bench_pool.py                        # both parts below
    python scripts/bench_pool.py --only alfworld --alfworld-steps 1600
    python scripts/bench_pool.py --only overhead --workers 2 --calls 300

- ``alfworld``: steps/s for 16 ALFWorld-v0 envs (the config's generated games, random admissible
  actions, an episode reset as soon as it ends) with the process pool (``--workers`` workers) and
  with Ray (``--workers`` actors of ``16 / workers`` envs each, one CPU each). Rounds alternate
  between the backends (``--repeats``); the median is printed.
- ``overhead``: wall time per ``pool.step`` call on 16 Sokoban envs, whose steps cost
  microseconds, so the figure is the pool's own cost per call: in-process, process pool, Ray;
  the ratio is against the process pool.

Ray runs as a local Ray started here with ``--ray-cpus`` CPUs (default: all). Wall-clock figures:
other processes on the machine share the CPUs (the load average is printed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from agentrl.pool import EnvSpec, make_pool

ROOT = Path(__file__).resolve().parents[1]
N_ENVS = 16


def _pool(backend: str, specs, workers: int):
    if backend == "in-process":
        return make_pool(specs, backend="process", num_workers=0)
    if backend == "process":
        return make_pool(specs, backend="process", num_workers=workers)
    return make_pool(specs, backend="ray", envs_per_actor=len(specs) // workers, actor_num_cpus=1)


def alfworld_steps_per_s(backend: str, workers: int, steps: int) -> float:
    cfg = OmegaConf.load(ROOT / "configs" / "env" / "alfworld.yaml")
    spec = EnvSpec(cfg.id, OmegaConf.to_container(cfg.kwargs, resolve=True))
    with _pool(backend, [spec] * N_ENVS, workers) as pool:
        ids = pool.call([0], "task_ids", "train", N_ENVS)[0]
        resets = [{"task_id": t} for t in ids]
        infos = [info for _, info in pool.reset(options=resets)]
        rng = np.random.default_rng(0)
        pool.step(range(N_ENVS), ["look"] * N_ENVS)  # warm: every worker has answered once
        done, t0 = 0, time.perf_counter()
        while done < steps:
            actions = [str(rng.choice(info["admissible_actions"])) for info in infos]
            results = pool.step(range(N_ENVS), actions)
            done += N_ENVS
            infos = [r.info for r in results]
            ended = [i for i, r in enumerate(results) if r.terminated or r.truncated]
            if ended:
                for i, (_, info) in zip(
                    ended, pool.reset(ended, options=[resets[i] for i in ended])
                ):
                    infos[i] = info
        return done / (time.perf_counter() - t0)


def sokoban_call_ms(backend: str, workers: int, calls: int) -> float:
    spec = EnvSpec("Sokoban-v0", {"dim_room": 6, "num_boxes": 1, "max_steps": 10**6})
    with _pool(backend, [spec] * N_ENVS, workers) as pool:
        pool.reset(seeds=list(range(N_ENVS)))
        moves = ["up", "down", "left", "right"]
        pool.step(range(N_ENVS), ["up"] * N_ENVS)
        t0 = time.perf_counter()
        for c in range(calls):
            pool.step(range(N_ENVS), [moves[c % 4]] * N_ENVS)
        return (time.perf_counter() - t0) / calls * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--only", choices=["alfworld", "overhead"], default=None)
    ap.add_argument("--workers", type=int, default=2, help="worker processes = Ray actors")
    ap.add_argument("--alfworld-steps", type=int, default=1600)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ray-cpus", type=int, default=None)
    args = ap.parse_args()

    import ray

    ray.init(num_cpus=args.ray_cpus, include_dashboard=False, log_to_driver=False)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"({os.cpu_count()} CPUs, load average {load}; Ray {ray.__version__})")
    w = args.workers
    if args.only in (None, "alfworld"):
        runs: dict[str, list[float]] = {"process": [], "ray": []}
        for _ in range(args.repeats):
            for backend in runs:
                runs[backend].append(alfworld_steps_per_s(backend, w, args.alfworld_steps))
        base = statistics.median(runs["process"])
        print(
            f"## ALFWorld-v0, {N_ENVS} envs, {args.alfworld_steps} steps, median of {args.repeats}"
        )
        print(f"{'backend':<26} {'steps/s':>9} {'ratio':>7}   runs")
        for backend, label in (("process", f"process ({w} workers)"), ("ray", f"ray ({w} actors)")):
            med = statistics.median(runs[backend])
            runs_s = " ".join(f"{x:.1f}" for x in runs[backend])
            print(f"{label:<26} {med:>9.1f} {med / base:>6.2f}x   {runs_s}")
    if args.only in (None, "overhead"):
        runs = {"in-process": [], "process": [], "ray": []}
        for _ in range(args.repeats):
            for backend in runs:
                runs[backend].append(sokoban_call_ms(backend, w, args.calls))
        base = statistics.median(runs["process"])
        print(f"## Sokoban-v0, {N_ENVS} envs: ms per pool.step call, median of {args.repeats}")
        print(f"{'backend':<26} {'ms/call':>9} {'ratio':>7}   runs")
        for backend in runs:
            label = {"process": f"process ({w} workers)", "ray": f"ray ({w} actors)"}
            med = statistics.median(runs[backend])
            runs_s = " ".join(f"{x:.2f}" for x in runs[backend])
            print(f"{label.get(backend, backend):<26} {med:>9.2f} {med / base:>6.2f}x   {runs_s}")
    ray.shutdown()


if __name__ == "__main__":
    main()
