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

Besides wall time, each row gives the CPU milliseconds per step (ALFWorld) or per call (Sokoban)
used by this process and every process under it (pool workers; Ray's actors, raylet and GCS),
which depends far less on what else runs on the machine.

Ray runs as a local Ray started here with ``--ray-cpus`` CPUs (default: all). Wall-clock figures:
other processes on the machine share the CPUs (the load average is printed).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from pathlib import Path

import numpy as np
import psutil
from omegaconf import OmegaConf

from agentrl.pool import EnvSpec, make_pool

ROOT = Path(__file__).resolve().parents[1]
N_ENVS = 16


def _tree_cpu() -> dict[int, float]:
    """CPU seconds so far of this process and of every process under it (workers, Ray), by pid."""
    me = psutil.Process()
    times = {me.pid: sum(me.cpu_times()[:2])}
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            times[child.pid] = sum(child.cpu_times()[:2])
    return times


def _cpu_since(before: dict[int, float]) -> float:
    """CPU seconds used since ``before`` by the processes alive now (new ones count in full)."""
    return sum(t - before.get(pid, 0.0) for pid, t in _tree_cpu().items())


def _pool(backend: str, specs, workers: int):
    if backend == "in-process":
        return make_pool(specs, backend="process", num_workers=0)
    if backend == "process":
        return make_pool(specs, backend="process", num_workers=workers)
    return make_pool(specs, backend="ray", envs_per_actor=len(specs) // workers, actor_num_cpus=1)


def alfworld_steps_per_s(backend: str, workers: int, steps: int) -> tuple[float, float]:
    """(steps/s, CPU ms per step over this process and all its children)."""
    cfg = OmegaConf.load(ROOT / "configs" / "env" / "alfworld.yaml")
    spec = EnvSpec(cfg.id, OmegaConf.to_container(cfg.kwargs, resolve=True))
    with _pool(backend, [spec] * N_ENVS, workers) as pool:
        ids = pool.call([0], "task_ids", "train", N_ENVS)[0]
        resets = [{"task_id": t} for t in ids]
        infos = [info for _, info in pool.reset(options=resets)]
        rng = np.random.default_rng(0)
        pool.step(range(N_ENVS), ["look"] * N_ENVS)  # warm: every worker has answered once
        done, t0, cpu0 = 0, time.perf_counter(), _tree_cpu()
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
        return done / (time.perf_counter() - t0), _cpu_since(cpu0) / done * 1e3


def sokoban_call_ms(backend: str, workers: int, calls: int) -> tuple[float, float]:
    """(wall ms per call, CPU ms per call over this process and all its children)."""
    spec = EnvSpec("Sokoban-v0", {"dim_room": 6, "num_boxes": 1, "max_steps": 10**6})
    with _pool(backend, [spec] * N_ENVS, workers) as pool:
        pool.reset(seeds=list(range(N_ENVS)))
        moves = ["up", "down", "left", "right"]
        pool.step(range(N_ENVS), ["up"] * N_ENVS)
        t0, cpu0 = time.perf_counter(), _tree_cpu()
        for c in range(calls):
            pool.step(range(N_ENVS), [moves[c % 4]] * N_ENVS)
        return (time.perf_counter() - t0) / calls * 1e3, _cpu_since(cpu0) / calls * 1e3


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
    print(f"({os.cpu_count()} CPUs, load average {load}; Ray {ray.__version__})", flush=True)
    w = args.workers
    labels = {"process": f"process ({w} workers)", "ray": f"ray ({w} actors)"}

    def report(title: str, unit: str, runs: dict[str, list[tuple[float, float]]]) -> None:
        print(f"## {title}, median of {args.repeats} (runs alternate between backends)")
        print(f"{'backend':<22} {unit:>10} {'ratio':>7} {'CPU ms':>8} {'ratio':>7}   runs")
        base = [statistics.median(x[k] for x in runs["process"]) for k in (0, 1)]
        for backend, values in runs.items():
            med = [statistics.median(x[k] for x in values) for k in (0, 1)]
            each = " ".join(f"{x[0]:.2f}" for x in values)
            print(
                f"{labels.get(backend, backend):<22} {med[0]:>10.2f} {med[0] / base[0]:>6.2f}x "
                f"{med[1]:>8.2f} {med[1] / base[1]:>6.2f}x   {each}"
            )

    if args.only in (None, "alfworld"):
        runs: dict[str, list[tuple[float, float]]] = {"process": [], "ray": []}
        for _ in range(args.repeats):
            for backend in runs:
                runs[backend].append(alfworld_steps_per_s(backend, w, args.alfworld_steps))
                print(f"  alfworld {backend}: {runs[backend][-1]}", flush=True)
        report(f"ALFWorld-v0, {N_ENVS} envs, {args.alfworld_steps} steps", "steps/s", runs)
    if args.only in (None, "overhead"):
        runs = {"in-process": [], "process": [], "ray": []}
        for _ in range(args.repeats):
            for backend in runs:
                runs[backend].append(sokoban_call_ms(backend, w, args.calls))
                print(f"  sokoban {backend}: {runs[backend][-1]}", flush=True)
        report(f"Sokoban-v0, {N_ENVS} envs, one pool.step call", "ms/call", runs)
    ray.shutdown()


if __name__ == "__main__":
    main()
