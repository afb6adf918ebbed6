"""Slowest legitimate call per env config: the basis of each ``configs/env/*.yaml`` step_timeout.

    python scripts/measure_step_times.py                   # every configs/env/*.yaml
    python scripts/measure_step_times.py --envs alfworld --episodes 10

For each env config this builds the env with its ``kwargs`` and times, in this process, every call
the pool makes under ``step_timeout``: ``task_ids`` of the training and evaluation splits, resets
(training seeds or ids, and the held-out ids), and steps, over ``--episodes`` episodes of up to the
config's ``max_steps``. Actions mix the env's expert action, random admissible actions and junk
text (invalid actions are legitimate model output; interpreter escapes such as ``\\help``, which
hang TextWorld's interpreter, are left out: that is a TextWorld bug handled by envs/textworld, not a slow step).
Resets are timed twice: with the cache warm, and with a fresh, empty ``AGENTRL_CACHE_DIR`` (the
first run on a new machine, where ALFWorld makes its games on first use). Building the env is
timed but is not under ``step_timeout`` (the pool waits for it untimed).

The suggested timeout is ``max(FLOOR, MARGIN x slowest call)`` rounded up to 10 s: the margin
covers a loaded machine (the figures here come from a shared 2-core box) and model output longer
than the measured one.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
FLOOR = 30.0
MARGIN = 10.0
JUNK = ["", "xyzzy", "go to the moon", "take " + "very " * 200 + "long thing", "?!", "look."]


def suggest(slowest: float) -> int:
    return int(math.ceil(max(FLOOR, MARGIN * slowest) / 10.0) * 10)


def _split_ids(env, split, limit):
    if not split or not hasattr(env, "task_ids"):
        return []
    return list(env.task_ids(split, limit))


def measure(name: str, episodes: int, rng: random.Random) -> dict[str, float]:
    """Times of one env config's calls (seconds); keys: build, task_ids, reset, step."""
    from agentrl import envs

    cfg = OmegaConf.load(ROOT / "configs" / "env" / f"{name}.yaml")
    kwargs = OmegaConf.to_container(cfg.kwargs, resolve=True) or {}
    t = time.perf_counter()
    env = envs.make(cfg.id, **kwargs)
    times = {"build": time.perf_counter() - t, "task_ids": 0.0, "reset": 0.0, "step": 0.0}
    unwrapped = getattr(env, "unwrapped", env)

    def timed(key, fn, *a, **kw):
        t = time.perf_counter()
        out = fn(*a, **kw)
        times[key] = max(times[key], time.perf_counter() - t)
        return out

    train = cfg.train_tasks
    train_ids = timed("task_ids", _split_ids, unwrapped, None if train == "seeds" else train, None)
    eval_ids = timed("task_ids", _split_ids, unwrapped, cfg.get("eval_split"), episodes)
    for ep in range(episodes):
        if ep % 2 and eval_ids:
            _, info = timed("reset", env.reset, options={"task_id": eval_ids[ep % len(eval_ids)]})
        elif train_ids:
            _, info = timed("reset", env.reset, options={"task_id": rng.choice(train_ids)})
        else:
            _, info = timed("reset", env.reset, seed=rng.randrange(int(cfg.train_seed_high)))
        for _ in range(int(cfg.max_steps)):
            roll = rng.random()
            action = rng.choice(JUNK)
            if roll < 0.6 and hasattr(unwrapped, "expert_action"):
                with contextlib.suppress(Exception):
                    action = unwrapped.expert_action()
            elif roll < 0.9 and info.get("admissible_actions"):
                action = rng.choice(list(info["admissible_actions"]))
            _, _, terminated, truncated, info = timed("step", env.step, action)
            if terminated or truncated:
                break
    env.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--envs", nargs="*", default=None, help="configs/env names (default: all)")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cold", action="store_true", help=argparse.SUPPRESS)  # internal
    args = ap.parse_args()
    names = args.envs or sorted(p.stem for p in (ROOT / "configs" / "env").glob("*.yaml"))
    if args.cold:  # child run: print the times of one env, cache already pointed at an empty dir
        times = measure(names[0], args.episodes, random.Random(args.seed))
        print("TIMES", *(f"{k}={v}" for k, v in times.items()))
        return
    print("Slowest call (s); cold: a fresh AGENTRL_CACHE_DIR. step_timeout: the suggested default.")
    print(
        "| env | build (untimed) | task_ids | reset | step | cold task_ids | cold reset | step_timeout |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        warm = measure(name, args.episodes, random.Random(args.seed))
        with tempfile.TemporaryDirectory() as cache:
            import subprocess

            env = dict(os.environ, AGENTRL_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
            cmd = [sys.executable, __file__, "--cold", "--envs", name, "--episodes", "4"]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            line = next(ln for ln in out.stdout.splitlines() if ln.startswith("TIMES"))
            cold = {k: float(v) for k, v in (kv.split("=") for kv in line.split()[1:])}
        timed = ("task_ids", "reset", "step")
        slowest = max(max(warm[k], cold[k]) for k in timed)
        print(
            f"| {name} | {warm['build']:.2f} (cold {cold['build']:.2f}) | {warm['task_ids']:.3f} "
            f"| {warm['reset']:.3f} | {warm['step']:.3f} | {cold['task_ids']:.3f} | {cold['reset']:.3f} "
            f"| {suggest(slowest)} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
