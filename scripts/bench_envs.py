"""Environment benchmarks: Sokoban generation, and resets/s and steps/s through the env pool.

    python scripts/bench_envs.py                       # everything below
    python scripts/bench_envs.py --only generation     # Sokoban 10x10/3-box generation
    python scripts/bench_envs.py --only pool --envs Sokoban-v0 FrozenLake-v0

Generation is compared with gym-sokoban's implementation of the same algorithm, run in this
process: its ``room_utils.py`` is taken from the gym-sokoban 0.0.6 wheel (``pip download``; pass
``--gym-sokoban PATH/room_utils.py`` to use a copy you have). It is never part of agentrl.
Pool throughput is measured in-process (0 workers) and with 2 workers; ratios are printed
against the in-process run.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import random
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
from agentrl.envs.sokoban import generate_room

from agentrl.pool import EnvPool, EnvSpec

#: Env ids and kwargs measured by the pool benchmark (other envs add their entries).
POOL_ENVS: dict[str, dict] = {
    "Sokoban-v0": {"dim_room": [6, 6], "num_boxes": 1, "max_steps": 15},
    "FrozenLake-v0": {},
}


def load_gym_sokoban(path: str | None):
    """gym-sokoban's room_utils module, from ``path`` or from its wheel on PyPI (None if neither)."""
    if path is None:
        tmp = Path(tempfile.mkdtemp())
        try:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "gym-sokoban==0.0.6",
                    "--no-deps",
                    "-q",
                    "-d",
                    str(tmp),
                ],
                check=True,
                capture_output=True,
                timeout=120,
            )
            wheel = next(tmp.glob("gym_sokoban-*.whl"))
            with zipfile.ZipFile(wheel) as zf:
                zf.extract("gym_sokoban/envs/room_utils.py", tmp)
            path = str(tmp / "gym_sokoban/envs/room_utils.py")
        except Exception as exc:  # no registry access: report ours only
            print(f"(gym-sokoban baseline unavailable: {exc})")
            return None
    spec = importlib.util.spec_from_file_location("gym_sokoban_room_utils", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_generation(rooms: int, baseline_path: str | None) -> None:
    print(f"## Sokoban generation, 10x10, 3 boxes ({rooms} rooms)")
    ours = []
    for seed in range(rooms):
        t0 = time.perf_counter()
        generate_room(np.random.default_rng(seed), (10, 10), num_boxes=3, max_steps=120)
        ours.append(time.perf_counter() - t0)
    print(f"agentrl      : mean {np.mean(ours):.4f} s, max {np.max(ours):.3f} s per room")
    ru = load_gym_sokoban(baseline_path)
    if ru is None:
        return
    theirs = []
    for seed in range(rooms):
        random.seed(seed)
        np.random.seed(seed)
        t0 = time.perf_counter()
        # gym-sokoban's SokobanEnv defaults for 10x10: num_gen_steps = 1.7 * (10 + 10).
        # It raises when a draw fails; the time still counts.
        with contextlib.suppress(RuntimeError, RuntimeWarning):
            ru.generate_room(dim=(10, 10), num_steps=34, num_boxes=3)
        theirs.append(time.perf_counter() - t0)
    print(f"gym-sokoban  : mean {np.mean(theirs):.4f} s, max {np.max(theirs):.3f} s per room")
    print(f"speed-up     : {np.mean(theirs) / np.mean(ours):.1f}x (mean time per room)")


def _throughput(
    env_id: str, kwargs: dict, num_envs: int, workers: int, steps: int
) -> tuple[float, float]:
    """(resets/s, steps/s) for ``num_envs`` envs of ``env_id`` through a pool of ``workers``."""
    spec = EnvSpec(env_id, kwargs)
    with EnvPool([spec] * num_envs, num_workers=workers) as pool:
        pool.reset(seeds=list(range(num_envs)))  # warm-up (worker start, imports)
        t0 = time.perf_counter()
        rounds = 5
        for r in range(rounds):
            pool.reset(seeds=[r * num_envs + i for i in range(num_envs)])
        resets = rounds * num_envs / (time.perf_counter() - t0)
        rng = np.random.default_rng(0)
        infos = [info for _, info in pool.reset(seeds=list(range(num_envs)))]
        done_steps = 0
        t0 = time.perf_counter()
        while done_steps < steps:
            actions = [str(rng.choice(info["admissible_actions"] or ["noop"])) for info in infos]
            results = pool.step(range(num_envs), actions)
            done_steps += num_envs
            ended = [i for i, res in enumerate(results) if res.terminated or res.truncated]
            infos = [res.info for res in results]
            if ended:
                for i, (_, info) in zip(
                    ended, pool.reset(ended, seeds=[done_steps + i for i in ended])
                ):
                    infos[i] = info
        return resets, done_steps / (time.perf_counter() - t0)


def bench_pool(env_ids: list[str], num_envs: int, steps: int) -> None:
    print(f"## Env pool throughput ({num_envs} envs, {steps} steps, random admissible actions)")
    print(f"{'env':<16} {'workers':>7} {'resets/s':>10} {'steps/s':>10} {'steps ratio':>12}")
    for env_id in env_ids:
        base = None
        for workers in (0, 2):
            resets, sps = _throughput(env_id, POOL_ENVS.get(env_id, {}), num_envs, workers, steps)
            base = base or sps
            print(f"{env_id:<16} {workers:>7} {resets:>10.0f} {sps:>10.0f} {sps / base:>11.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", choices=["generation", "pool"])
    parser.add_argument("--rooms", type=int, default=50)
    parser.add_argument("--gym-sokoban", default=None, help="path to gym-sokoban's room_utils.py")
    parser.add_argument("--envs", nargs="+", default=list(POOL_ENVS))
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=4000)
    args = parser.parse_args()
    if args.only in (None, "generation"):
        bench_generation(args.rooms, args.gym_sokoban)
    if args.only in (None, "pool"):
        bench_pool(args.envs, args.num_envs, args.steps)


if __name__ == "__main__":
    main()
