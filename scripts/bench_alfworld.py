"""ALFWorld benchmarks: wrapper overhead, generator throughput, env-pool scaling, expert check.

    python scripts/bench_alfworld.py                    # everything below
    python scripts/bench_alfworld.py --only latency     # ALFWorld-v0 vs the raw engine
    python scripts/bench_alfworld.py --only generation  # games per minute
    python scripts/bench_alfworld.py --only pool        # steps/s through EnvPool, 2 workers vs 1
    python scripts/bench_alfworld.py --only expert      # the expert on 10 games per task type
    python scripts/bench_alfworld.py --only stats       # generated-game statistics per task type

- latency: on the same games, the raw engine (TextWorld's ``PddlEnv`` in alfworld's
  ``AlfredDemangler``, asked for admissible commands and ``won``, what alfworld's ``AlfredTWEnv``
  plays) against ``ALFWorld-v0``. Steps: each game's expert walkthrough replayed on both,
  interleaved round by round (this machine is shared; medians of rounds). Resets: the raw engine's
  per-episode ``load`` + ``reset`` (what ``textworld.gym`` does on every reset) against
  ``env.reset(options={"task_id"})`` alternating between games, and a replay of the same game.
- generation: ``generate_games`` into a fresh directory.
- pool: ``EnvPool`` with 1 and 2 worker processes, 4 envs, random admissible actions.
- expert: 10 generated games per task type (60), each played by ``expert_action()`` on the real
  engine; wins and steps per task type (the issue's bar: every game won within 50 steps).

Games come from ``generate_games`` (cached under the agentrl cache, made once).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
from agentrl.envs.alfworld import ALFWorldEnv, default_cache_dir
from agentrl.envs.alfworld.engine import import_engine
from agentrl.envs.alfworld.generate import generate_games
from agentrl.envs.alfworld.tasks import SHORT_NAMES, TASK_TYPES

from agentrl.pool import EnvPool, EnvSpec


def bench_data(per_type: int, seed: int) -> Path:
    out = default_cache_dir() / f"bench-seed{seed}"
    generate_games(out, {"train": per_type}, seed=seed, splits=["train"], progress=True)
    return out


def raw_engine():
    """The engine as alfworld plays it: PddlEnv in AlfredDemangler, admissible commands + won."""
    textworld, PddlEnv, AlfredDemangler = import_engine()
    return AlfredDemangler(
        PddlEnv(textworld.EnvInfos(admissible_commands=True, won=True)), shuffle=False
    )


def _raw_episode(engine, game_file: str, plan: list[str]) -> tuple[float, float]:
    """(reset seconds, mean step seconds) of the raw engine: load + reset, then the plan."""
    t0 = time.perf_counter()
    engine.load(game_file)
    engine.reset()
    t1 = time.perf_counter()
    for cmd in plan:
        engine.step(cmd)
    return t1 - t0, (time.perf_counter() - t1) / len(plan)


def _our_episode(env: ALFWorldEnv, task_id: str, plan: list[str]) -> tuple[float, float]:
    t0 = time.perf_counter()
    env.reset(options={"task_id": task_id})
    t1 = time.perf_counter()
    for cmd in plan:
        env.step(cmd)
    return t1 - t0, (time.perf_counter() - t1) / len(plan)


def bench_latency(data_dir: Path, rounds: int) -> None:
    env = ALFWorldEnv(data_dir=str(data_dir))
    ids = env.task_ids("train", limit=6)  # one game per task type
    games = []
    for tid in ids:
        ref = env.games.get(tid)
        data = json.loads(ref.game_file.read_text())
        games.append((tid, str(ref.game_file), data["walkthrough"]))
    raw = raw_engine()
    rows = {
        k: []
        for k in (
            "raw_step",
            "our_step",
            "raw_reset_new",
            "our_reset_new",
            "raw_reset_same",
            "our_reset_same",
        )
    }
    argv = list(sys.argv)
    for _ in range(rounds):
        for tid, path, plan in games:
            r_reset, r_step = _raw_episode(raw, path, plan)
            o_reset, o_step = _our_episode(env, tid, plan)
            rows["raw_step"].append(r_step)
            rows["our_step"].append(o_step)
            rows["raw_reset_new"].append(r_reset)
            rows["our_reset_new"].append(o_reset)
        tid, path, plan = games[0]
        raw.load(path)
        for _ in range(3):
            t0 = time.perf_counter()
            raw.reset()
            rows["raw_reset_same"].append(time.perf_counter() - t0)
            env.reset(options={"task_id": tid})
            t0 = time.perf_counter()
            env.reset(options={"task_id": tid})
            rows["our_reset_same"].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"## ALFWorld-v0 vs raw engine ({len(games)} games, {rounds} rounds, medians)")
    print(f"{'what':<34} {'raw engine':>12} {'ALFWorld-v0':>12} {'ratio':>8}")
    for label, a, b in (
        ("step (ms)", "raw_step", "our_step"),
        ("reset, new game (ms)", "raw_reset_new", "our_reset_new"),
        ("reset, same game (ms)", "raw_reset_same", "our_reset_same"),
    ):
        print(f"{label:<34} {med[a] * 1e3:>12.1f} {med[b] * 1e3:>12.1f} {med[b] / med[a]:>7.2f}x")
    env.close()
    sys.argv[:] = argv  # the raw engine's translator overwrote it


def bench_generation(per_type: int, seed: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        summary = generate_games(
            tmp, {"train": per_type}, seed=seed, splits=["train"], progress=False
        )
    n = summary["written"]
    print(f"## Generator throughput ({n} games, {per_type} per task type, seed {seed})")
    print(f"{n} games in {summary['seconds']:.1f} s: {60 * n / summary['seconds']:.1f} games/min")


def _cpu_seconds(pids: list[int]) -> float:
    return sum(sum(psutil.Process(p).cpu_times()[:2]) for p in pids)


def _pool_steps(spec: EnvSpec, ids: list[str], workers: int, steps: int) -> tuple[float, float]:
    """(steps/s, cores the workers kept busy = their CPU seconds / wall seconds)."""
    n = len(ids)
    with EnvPool([spec] * n, num_workers=workers) as pool:
        infos = [info for _, info in pool.reset(options=[{"task_id": t} for t in ids])]
        rng = np.random.default_rng(0)
        pids = pool.worker_pids()
        cpu0 = _cpu_seconds(pids)
        done, t0 = 0, time.perf_counter()
        while done < steps:
            actions = [str(rng.choice(info["admissible_actions"])) for info in infos]
            results = pool.step(range(n), actions)
            done += n
            infos = [r.info for r in results]
            ended = [i for i, r in enumerate(results) if r.terminated or r.truncated]
            if ended:
                for i, (_, info) in zip(
                    ended, pool.reset(ended, options=[{"task_id": ids[i]} for i in ended])
                ):
                    infos[i] = info
        wall = time.perf_counter() - t0
        return done / wall, (_cpu_seconds(pids) - cpu0) / wall


def bench_pool(data_dir: Path, steps: int) -> None:
    env = ALFWorldEnv(data_dir=str(data_dir))
    ids = env.task_ids("train", limit=4)
    env.close()
    spec = EnvSpec("ALFWorld-v0", {"data_dir": str(data_dir), "max_steps": 50})
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"## EnvPool throughput, ALFWorld-v0 (4 envs, {steps} steps, random admissible actions)")
    print(f"({os.cpu_count()} CPUs, load average {load}: other processes share them)")
    print(f"{'workers':>7} {'steps/s':>10} {'ratio':>8} {'busy cores':>11}")
    base = None
    for workers in (1, 2):
        sps, busy = _pool_steps(spec, ids, workers, steps)
        base = base or sps
        print(f"{workers:>7} {sps:>10.1f} {sps / base:>7.2f}x {busy:>11.2f}")


def bench_expert(data_dir: Path) -> None:
    env = ALFWorldEnv(data_dir=str(data_dir))
    per_type: dict[str, list[tuple[bool, int]]] = {t: [] for t in TASK_TYPES.values()}
    t0 = time.perf_counter()
    for tid in env.task_ids("train"):
        _, info = env.reset(options={"task_id": tid})
        steps, done = 0, False
        while not done:
            _, _, terminated, truncated, info = env.step(env.expert_action())
            steps += 1
            done = terminated or truncated
        per_type[info["task_type"]].append((bool(info["won"]), steps))
    env.close()
    games = sum(len(v) for v in per_type.values())
    print(f"## Expert on {games} generated games (max_steps 50), {time.perf_counter() - t0:.0f} s")
    print(f"{'task type':<8} {'games':>6} {'won':>5} {'mean steps':>11} {'max steps':>10}")
    for t, rows in per_type.items():
        if rows:
            won = sum(w for w, _ in rows)
            steps = [s for _, s in rows]
            print(
                f"{SHORT_NAMES[t]:<8} {len(rows):>6} {won:>5} {statistics.mean(steps):>11.1f} {max(steps):>10}"
            )
    total_won = sum(w for rows in per_type.values() for w, _ in rows)
    print(f"all      {games:>6} {total_won:>5}")


def bench_stats(per_type: int, seed: int, splits: list[str]) -> None:
    """Per split and task type: receptacles, shared locations, objects and optimal plan length
    of generated games (the expert's plan is a shortest one, see oracle.py)."""
    from agentrl.envs.alfworld.generate import Generator

    gen = Generator()
    print("split         type   games  receptacles  shared-loc recs  objects  plan (min-max)")
    try:
        for split in splits:
            for t in TASK_TYPES.values():
                recs, shared, objs, plans = [], [], [], []
                for k in range(per_type):
                    spec, plan = gen.make(t, split, seed, k)
                    locs = [
                        line.split()[-1].rstrip(")")
                        for line in spec.problem.splitlines()
                        if line.strip().startswith("(receptacleAtLocation")
                    ]
                    recs.append(len(locs))
                    shared.append(sum(1 for x in locs if locs.count(x) > 1))
                    objs.append(len(spec.objects))
                    plans.append(len(plan))
                print(
                    f"{split:<13} {SHORT_NAMES[t]:<6} {per_type:>5} {statistics.mean(recs):>12.1f} "
                    f"{statistics.mean(shared):>16.1f} {statistics.mean(objs):>8.1f} "
                    f"{statistics.mean(plans):>6.1f} ({min(plans)}-{max(plans)})"
                )
    finally:
        gen.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", choices=["latency", "generation", "pool", "expert", "stats"])
    parser.add_argument(
        "--stats-splits", nargs="+", default=["valid_seen", "valid_unseen"], help="for --only stats"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--per-type", type=int, default=10, help="games per task type for the expert check"
    )
    parser.add_argument("--rounds", type=int, default=3, help="latency rounds over the six games")
    parser.add_argument(
        "--gen-per-type", type=int, default=2, help="games per task type for throughput"
    )
    parser.add_argument("--pool-steps", type=int, default=400)
    args = parser.parse_args()
    need_data = args.only in (None, "latency", "pool", "expert")
    data = (
        bench_data(args.per_type if args.only in (None, "expert") else 1, args.seed)
        if need_data
        else None
    )
    if args.only in (None, "latency"):
        bench_latency(data, args.rounds)
    if args.only in (None, "generation"):
        bench_generation(args.gen_per_type, args.seed + 1000)
    if args.only in (None, "pool"):
        bench_pool(data, args.pool_steps)
    if args.only in (None, "expert"):
        bench_expert(data)
    if args.only == "stats":
        bench_stats(args.per_type, args.seed, args.stats_splits)


if __name__ == "__main__":
    main()
