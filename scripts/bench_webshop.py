"""WebShop-v0 benchmarks: catalogue build, step latency, and memory per additional env.

    python scripts/bench_webshop.py                      # 1k and 100k products (builds them once)
    python scripts/bench_webshop.py --sizes 1000 --workers 2

What it measures, per catalogue size:

- build: time to generate the catalogue and instructions and to build the BM25 index (into a
  fresh directory, so nothing is cached), and the index's size on disk;
- step latency: median / p90 over the steps of episodes played by a mixed policy (half expert,
  half random admissible clicks; searches use the instruction text, the costliest query),
  with search steps also reported alone; targets: median <= 5 ms (1k) and <= 30 ms (100k);
- memory per additional env, in one process: anonymous (heap) memory added by 20 more envs,
  each played for a few episodes, divided by 20;
- memory per additional env across processes: an EnvPool of N workers (forkserver), one env each,
  every env played; the worker's own memory (anonymous pages, and PSS) minus that of the same pool
  on a 100-product catalogue (same imports, same code), i.e. what the catalogue costs a worker;
- baseline (the reference's design, one catalogue per env): the anonymous memory of loading the
  same catalogue's records as Python objects, as every reference env does; the ratio is that over
  our per-env figure. Target: <= 10 MB per additional env with 100k products.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from agentrl.envs.webshop import WebShopEnv, generated_catalogue

from agentrl.pool import EnvPool, EnvSpec

MB = 1024 * 1024


def smaps(pid: int | str = "self") -> dict[str, int]:
    """Bytes of ``Rss``, ``Pss``, ``Anonymous`` (heap and other private, non-file memory)."""
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if parts and parts[0].rstrip(":") in ("Rss", "Pss", "Anonymous"):
                out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return out


def play(
    env: WebShopEnv,
    episodes: int,
    rng: random.Random,
    timings: dict[str, list[float]] | None = None,
) -> int:
    """Play ``episodes`` with the mixed policy; record per-step seconds; returns steps taken."""
    steps = 0
    for _ in range(episodes):
        obs, info = env.reset(seed=rng.randrange(10**9))
        done = False
        while not done:
            if rng.random() < 0.5:
                action = env.expert_action()
            else:
                adm = info["admissible_actions"] or ["search[<your query>]"]
                action = rng.choice(adm)
                if action.startswith("search["):
                    action = f"search[{info['instruction'].split(', and price')[0]}]"
            t0 = time.perf_counter()
            obs, _, term, trunc, info = env.step(action)
            dt = time.perf_counter() - t0
            if timings is not None:
                timings["all"].append(dt)
                if action.startswith("search["):
                    timings["search"].append(dt)
            steps += 1
            done = term or trunc
    return steps


def bench_build(n: int, root: Path) -> dict:
    t0 = time.perf_counter()
    cat = generated_catalogue(n, seed=0, cache_dir=root)
    build_s = time.perf_counter() - t0
    index_bytes = sum(p.stat().st_size for p in (cat.path / "index").iterdir())
    data_bytes = sum(p.stat().st_size for p in cat.path.iterdir() if p.is_file())
    return {
        "build_s": build_s,
        "index_mb": index_bytes / MB,
        "records_mb": data_bytes / MB,
        "goals": cat.num_goals,
    }


def bench_latency(n: int, root: Path, episodes: int) -> dict:
    env = WebShopEnv(num_products=n, cache_dir=str(root))
    play(env, 5, random.Random(1))  # warm up
    timings: dict[str, list[float]] = {"all": [], "search": []}
    play(env, episodes, random.Random(0), timings)
    q = statistics.quantiles(timings["all"], n=10)
    return {
        "steps": len(timings["all"]),
        "median_ms": 1e3 * statistics.median(timings["all"]),
        "p90_ms": 1e3 * q[8],
        "search_median_ms": 1e3 * statistics.median(timings["search"]),
        "search_steps": len(timings["search"]),
    }


def bench_search(n: int, root: Path, num_queries: int = 1200) -> dict:
    """Search latency alone over the four query kinds of ``scripts/compare_lucene.py``
    (instruction, goal query, product title, attributes + query): median and p90, wall and CPU."""
    from compare_lucene import make_queries

    cat = generated_catalogue(n, cache_dir=root)
    queries = [q for _, q in make_queries(cat, num_queries, 1)]
    for q in queries[:50]:  # warm the page cache and the analyser's caches
        cat.search(q)
    wall, cpu = [], []
    for q in queries:
        t0, c0 = time.perf_counter(), time.process_time()
        cat.search(q)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    wall.sort()
    return {
        "search_queries": len(queries),
        "search_wall_median_ms": 1e3 * statistics.median(wall),
        "search_wall_p90_ms": 1e3 * wall[int(0.9 * len(wall))],
        "search_cpu_median_ms": 1e3 * statistics.median(cpu),
    }


def bench_memory_in_process(n: int, root: Path, extra: int = 20) -> dict:
    first = WebShopEnv(num_products=n, cache_dir=str(root))
    rng = random.Random(2)
    play(first, 10, rng)
    before = smaps()["Anonymous"]
    envs = [WebShopEnv(num_products=n, cache_dir=str(root)) for _ in range(extra)]
    for e in envs:
        play(e, 3, rng)
    after = smaps()["Anonymous"]
    return {"per_env_mb": (after - before) / extra / MB}


def _pool_memory(n: int, root: Path, workers: int, episodes: int) -> tuple[float, float]:
    spec = EnvSpec("WebShop-v0", {"num_products": n, "cache_dir": str(root)})
    with EnvPool([spec] * workers, num_workers=workers, mp_context="forkserver") as pool:
        rng = random.Random(3)
        for _ in range(episodes):
            pool.reset(seeds=[rng.randrange(10**9) for _ in range(workers)])
            live = list(range(workers))
            while live:
                actions = pool.call(live, "expert_action")
                results = pool.step(live, actions)
                live = [i for i, r in zip(live, results) if not (r.terminated or r.truncated)]
        pool.reset(seeds=list(range(workers)))
        pool.step(
            list(range(workers)), ["search[organic natural free black large quality]"] * workers
        )  # a wide search
        stats = [smaps(pid) for pid in pool.worker_pids()]
    return (
        statistics.mean(s["Anonymous"] for s in stats) / MB,
        statistics.mean(s["Pss"] for s in stats) / MB,
    )


def bench_memory_workers(n: int, root: Path, workers: int) -> dict:
    generated_catalogue(100, seed=0, cache_dir=root)
    anon_small, pss_small = _pool_memory(100, root, workers, 4)
    anon_big, pss_big = _pool_memory(n, root, workers, 4)
    return {
        "workers": workers,
        "worker_anon_mb": anon_big,
        "worker_pss_mb": pss_big,
        "catalogue_anon_per_worker_mb": anon_big - anon_small,
        "catalogue_pss_per_worker_mb": pss_big - pss_small,
    }


def bench_reference_baseline(n: int, root: Path) -> dict:
    """Anonymous memory of holding the catalogue's records as Python objects (the reference)."""
    cat = generated_catalogue(n, seed=0, cache_dir=root)
    before = smaps()["Anonymous"]
    records = [
        json.loads(cat._products.mm[int(a) : int(b)])
        for a, b in zip(cat._products.offsets[:-1], cat._products.offsets[1:])
    ]
    after = smaps()["Anonymous"]
    assert len(records) == n
    del records
    return {"reference_per_env_mb": (after - before) / MB}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 100_000])
    ap.add_argument("--episodes", type=int, default=200, help="episodes timed per size")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument(
        "--cache-dir", default=None, help="where catalogues are built (default: a fresh temp dir)"
    )
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument(
        "--search-only", action="store_true", help="only build and time searches (1,200 queries)"
    )
    args = ap.parse_args()

    root = Path(args.cache_dir or tempfile.mkdtemp(prefix="bench-webshop-"))
    results = {}
    for n in args.sizes:
        r = {"products": n}
        r.update(bench_build(n, root))
        if args.search_only:
            r.update(bench_search(n, root))
            results[n] = r
            print(
                f"{n:,} products: build {r['build_s']:.1f} s, index {r['index_mb']:.1f} MB; search over "
                f"{r['search_queries']} queries: median {r['search_wall_median_ms']:.2f} ms "
                f"(CPU {r['search_cpu_median_ms']:.2f} ms), p90 {r['search_wall_p90_ms']:.2f} ms"
            )
            continue
        r.update(bench_latency(n, root, args.episodes))
        r.update(bench_memory_in_process(n, root))
        r.update(bench_memory_workers(n, root, args.workers))
        r.update(bench_reference_baseline(n, root))
        per_env = max(r["per_env_mb"], r["catalogue_anon_per_worker_mb"], 1e-3)
        r["reference_over_ours"] = r["reference_per_env_mb"] / per_env
        results[n] = r
        target = 5.0 if n <= 1000 else 30.0
        print(f"\n== {n:,} products ({r['goals']:,} instructions)")
        print(
            f"build (generate + index): {r['build_s']:.1f} s; index {r['index_mb']:.1f} MB, records {r['records_mb']:.1f} MB on disk"
        )
        print(
            f"step latency: median {r['median_ms']:.3f} ms (target <= {target:g} ms: {target / r['median_ms']:.0f}x under), "
            f"p90 {r['p90_ms']:.2f} ms over {r['steps']} steps; search steps median {r['search_median_ms']:.2f} ms ({r['search_steps']})"
        )
        print(f"memory per additional env, same process: {r['per_env_mb']:.3f} MB")
        print(
            f"memory per worker process ({r['workers']} workers, forkserver): catalogue-dependent anonymous "
            f"{r['catalogue_anon_per_worker_mb']:.2f} MB, PSS {r['catalogue_pss_per_worker_mb']:.2f} MB "
            f"(worker total: anonymous {r['worker_anon_mb']:.1f} MB, PSS {r['worker_pss_mb']:.1f} MB)"
        )
        print(
            f"reference design (records as Python objects per env): {r['reference_per_env_mb']:.1f} MB per env; "
            f"ratio reference / ours: {r['reference_over_ours']:.0f}x"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if not args.cache_dir:
        import shutil

        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
