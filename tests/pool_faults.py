"""A fault-injection campaign against an env pool: random faults, counted outcomes.

Each round steps every env once; some envs get a fault action of ``pool_envs.FragileSokoban``,
the others a move. A round checks the contract: the call returns (no exception out of the pool)
within the deadline plus slack; each faulty env's episode is cut with an error naming its cause;
an env whose worker had no fatal fault goes on untouched; envs that shared a worker with a fatal
fault are cut with the worker's cause. Cut envs are reset before the next round.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable

#: Faults that end the worker (every episode on it is cut) and the ones that end one episode.
FATAL = ("die", "segfault", "sigkill", "sleep")
CONTAINED = ("raise", "unpicklable")
MOVES = ("up", "down", "left", "right", "bad move")


def expected_cause(fault: str, backend: str) -> str:
    """Text the cut episode's ``info["error"]`` must contain for ``fault``."""
    if fault == "raise":
        return "RuntimeError: boom"
    if fault == "unpicklable":
        return "info['handle'] cannot be pickled"
    if fault == "sleep":
        return "timed out"
    if backend == "ray":
        return "died: ActorDiedError"
    return {"die": "exit code 3", "segfault": "SIGSEGV", "sigkill": "SIGKILL"}[fault]


def run_campaign(
    make_pool: Callable,
    backend: str,
    num_envs: int,
    num_groups: int,
    rounds: int,
    seed: int,
    timeout: float,
    fault_rate: float = 0.15,
) -> Counter:
    """Counts: tried (faults injected), clear_error, crashed, hung, collateral, wrong_cause."""
    rng = random.Random(seed)
    counts: Counter = Counter()
    with make_pool() as pool:
        pool.reset(seeds=list(range(num_envs)))
        for r in range(rounds):
            actions = [
                rng.choice(FATAL + CONTAINED) if rng.random() < fault_rate else rng.choice(MOVES)
                for _ in range(num_envs)
            ]
            fatal: dict[int, list[str]] = {}  # group -> causes its worker may report
            for i, a in enumerate(actions):
                if a in FATAL:
                    fatal.setdefault(i % num_groups, []).append(expected_cause(a, backend))
            counts["tried"] += sum(a in FATAL + CONTAINED for a in actions)
            start = time.monotonic()
            try:
                results = pool.step(range(num_envs), actions)
            except Exception as exc:  # the contract says this never happens
                counts["crashed"] += 1
                counts[f"crash: {type(exc).__name__}: {exc}"[:200]] += 1
                break
            per_worker = -(-num_envs // num_groups)  # the deadline is per env of a worker
            if time.monotonic() - start > timeout * per_worker + 5.0:
                counts["hung"] += 1
            cut = []
            for i, (a, res) in enumerate(zip(actions, results)):
                error = res.info.get("error", "")
                causes = fatal.get(i % num_groups)
                if causes is not None:  # the worker died or hung: all its episodes are cut
                    ok = res.truncated and any(c in error for c in causes)
                    counts["clear_error" if a in FATAL + CONTAINED else "cut_with_worker"] += ok
                    counts["wrong_cause"] += not ok
                elif a in CONTAINED:
                    ok = res.truncated and expected_cause(a, backend) in error
                    counts["clear_error" if ok else "wrong_cause"] += 1
                elif res.truncated and error:
                    counts["collateral"] += 1
                if res.truncated or res.terminated:
                    cut.append(i)
            if cut:
                pool.reset(cut, seeds=[1000 * (r + 1) + i for i in cut])
        counts["restarts"] = pool.restarts
    return counts
