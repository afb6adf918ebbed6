"""What serving envs over HTTP costs: the http pool against the process pool, same envs, same
process, and one server's throughput with many sessions.

    python scripts/bench_http.py                       # Sokoban and generated ALFWorld, 16/64 sessions
    python scripts/bench_http.py --envs sokoban --calls 200

For each env: ``--n`` envs stepped together, ``--calls`` pool steps each (episodes that end are
reset outside the clock), through (a) the process pool with ``--workers`` worker processes and
(b) the http pool against one ``python -m agentrl.pool.serve`` on loopback holding its envs in as
many worker processes. Printed: ms per pool step call, ms per env step, and (b)/(a). Then the
server's throughput: env steps per second with 16 and 64 sessions on one server (Sokoban).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from agentrl.pool import EnvSpec, make_pool

ROOT = Path(__file__).resolve().parents[1]
ENVS = {
    "sokoban": ("Sokoban-v0", {"dim_room": 5, "num_boxes": 1, "max_steps": 10}, "up"),
    "alfworld": ("ALFWorld-v0", {}, "look"),
}


def start_server(
    env_id: str, kwargs: dict, sessions: int, workers: int
) -> tuple[subprocess.Popen, str]:
    pairs = [f"{k}={v}" for k, v in kwargs.items()]
    cmd = [
        sys.executable,
        "-m",
        "agentrl.pool.serve",
        env_id,
        "--port",
        "0",
        "--workers",
        str(workers),
    ]
    cmd += ["--max-sessions", str(sessions), "--step-timeout", "120"]
    cmd += ["--kwargs", *pairs] if pairs else []
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("serving"):
        proc.kill()
        raise SystemExit(f"the server did not start: {line!r}")
    return proc, line.split(" on ")[1].split()[0]


def time_steps(pool, n: int, action: str, calls: int) -> float:
    """Seconds per ``pool.step`` over ``calls`` calls (resets of ended episodes not timed)."""
    pool.reset(seeds=list(range(n)))
    total = 0.0
    for c in range(calls):
        t0 = time.perf_counter()
        out = pool.step(range(n), [action] * n)
        total += time.perf_counter() - t0
        ended = [i for i, r in enumerate(out) if r.terminated or r.truncated]
        if ended:
            pool.reset(ended, seeds=[c * n + i for i in ended])
    return total / calls


def compare(name: str, n: int, workers: int, calls: int) -> None:
    env_id, kwargs, action = ENVS[name]
    specs = [EnvSpec(env_id, kwargs)] * n
    with make_pool(specs, num_workers=workers, step_timeout=120) as pool:
        base = time_steps(pool, n, action, calls)
    proc, url = start_server(env_id, kwargs, n, workers)
    try:
        with make_pool(specs, backend="http", http_urls=[url], step_timeout=120) as pool:
            http = time_steps(pool, n, action, calls)
    finally:
        proc.terminate()
        proc.wait(30)
    print(f"{name:<9} {n:>3} envs, {workers} workers: process {base * 1e3:8.2f} ms/call "
          f"({base / n * 1e6:8.0f} us/env step)   http {http * 1e3:8.2f} ms/call "
          f"({http / n * 1e6:8.0f} us/env step)   http/process {http / base:5.2f}x   "
          f"overhead {(http - base) * 1e3:+.2f} ms/call")  # fmt: skip


def throughput(sessions: int, workers: int, calls: int) -> None:
    env_id, kwargs, action = ENVS["sokoban"]
    proc, url = start_server(env_id, kwargs, sessions, workers)
    try:
        specs = [EnvSpec(env_id, kwargs)] * sessions
        with make_pool(specs, backend="http", http_urls=[url], step_timeout=120) as pool:
            per_call = time_steps(pool, sessions, action, calls)
    finally:
        proc.terminate()
        proc.wait(30)
    print(f"one server, {sessions:>3} sessions, {workers} workers: "
          f"{sessions / per_call:8.0f} env steps/s ({per_call * 1e3:.2f} ms per batched call)")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--envs", nargs="+", default=list(ENVS), choices=list(ENVS))
    ap.add_argument("--n", type=int, default=8, help="envs per pool in the comparison")
    ap.add_argument("--workers", type=int, default=2, help="env processes (pool and server)")
    ap.add_argument("--calls", type=int, default=100, help="timed pool steps per setting")
    ap.add_argument("--sessions", type=int, nargs="*", default=[16, 64])
    args = ap.parse_args()
    print(f"# bench_http: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"python {platform.python_version()}")  # fmt: skip
    for name in args.envs:
        compare(
            name,
            args.n,
            args.workers,
            args.calls if name == "sokoban" else max(10, args.calls // 5),
        )
    for s in args.sessions:
        throughput(s, args.workers, args.calls)


if __name__ == "__main__":
    main()
