"""Fault injection against the env pool, both backends: the counts docs/benchmarks.md quotes.

    PYTHONPATH=tests python scripts/fuzz_pool.py --rounds 100     # process pool and Ray
    PYTHONPATH=tests python scripts/fuzz_pool.py --backends process --rounds 300 --envs 8 --workers 4

``PYTHONPATH=tests``: the faulty envs are the test suite's (``tests/pool_envs.py``), and the
pool's workers import them by module name.

Each round steps every env once; about ``--fault-rate`` of the envs get a fault (the env raises,
returns a malformed result or an unpicklable ``info``, exits, segfaults, is SIGKILLed, or hangs
past ``--timeout``), the others a move. Counted: faults tried; faults whose episode was cut with
an error naming the cause (``clear_error``); calls that raised out of the pool (``crashed``);
calls that overran their deadlines by more than 5 s each (``hung``); episodes of healthy envs
that were cut (``collateral``; envs that share a worker with a fatal fault are replayed on the
restarted worker, so this stays 0); cut episodes whose error names the wrong cause
(``wrong_cause``); episodes restored by replay (``replayed``). The faulty env is
``tests/pool_envs.py``'s ``FragileSokoban``.

``--deadline``: instead, the wall time of one ``step`` call in which 1, 2 and 4 of 4 workers hang
(``step_timeout=2``, one env per worker): one deadline per call keeps it at ~2 s.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from pool_envs import fragile
from pool_faults import run_campaign

from agentrl.pool import make_pool

ROOT = Path(__file__).resolve().parents[1]

KEYS = ("tried", "clear_error", "crashed", "hung", "collateral", "wrong_cause", "replayed")


def _init_ray() -> None:
    import ray

    path = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    ray.init(
        include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": path}}
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--backends", nargs="*", default=["process", "ray"])
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--envs", type=int, default=8)
    ap.add_argument("--workers", type=int, default=4, help="worker processes = Ray actors")
    ap.add_argument("--timeout", type=float, default=1.0)
    ap.add_argument("--fault-rate", type=float, default=0.15)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--deadline", action="store_true", help="time calls with 1/2/4 hung workers")
    args = ap.parse_args()
    if args.deadline:
        for backend in args.backends:
            if backend == "ray":
                _init_ray()
            for hung in (1, 2, 4):
                with make_pool(
                    [fragile] * 4, backend=backend, num_workers=4, envs_per_actor=1,
                    actor_num_cpus=0.25, step_timeout=2.0,
                ) as pool:  # fmt: skip
                    pool.reset(seeds=[0, 1, 2, 3])
                    t0 = time.monotonic()
                    pool.step(range(4), ["sleep"] * hung + ["up"] * (4 - hung))
                    print(f"{backend}: {hung} hung workers, step_timeout 2 s: "
                          f"{time.monotonic() - t0:.2f} s", flush=True)  # fmt: skip
            if backend == "ray":
                import ray

                ray.shutdown()
        return
    print(f"| backend | rounds | {' | '.join(KEYS)} | restarts | seconds |")
    print(f"|---|---|{'---|' * len(KEYS)}---|---|")
    for backend in args.backends:
        if backend == "ray":
            import ray

            _init_ray()
        per = -(-args.envs // args.workers)

        def factory(backend=backend, per=per):
            return make_pool(
                [fragile] * args.envs,
                backend=backend,
                num_workers=args.workers,
                envs_per_actor=per,
                actor_num_cpus=0.25,
                step_timeout=args.timeout,
            )

        t0 = time.monotonic()
        counts = run_campaign(
            factory,
            backend,
            args.envs,
            args.workers,
            args.rounds,
            args.seed,
            args.timeout,
            args.fault_rate,
        )
        row = " | ".join(str(counts.get(k, 0)) for k in KEYS)
        extra = [k for k in counts if k.startswith("crash:")]
        print(
            f"| {backend} | {args.rounds} | {row} | {counts['restarts']} "
            f"| {time.monotonic() - t0:.0f} |",
            *extra,
            flush=True,
        )
        if backend == "ray":
            ray.shutdown()


if __name__ == "__main__":
    main()
