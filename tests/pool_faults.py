"""A fault-injection campaign against an env pool: random faults, counted outcomes.

Each round steps every env once; some envs get a fault action of ``pool_envs.FragileSokoban``,
the others a move. A round checks the contract: the call returns (no exception out of the pool)
within its deadlines plus slack (each fatal fault restarts a worker and may add one deadline);
each faulty env's episode is cut with an error naming its cause; every other env goes on, also
those that shared a worker with a fatal fault (they are replayed on the restarted worker). Cut
envs are reset before the next round.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable

from pool_envs import BAD_OUTPUTS

#: Faults that end the worker (it is restarted) and the ones it survives; each costs one episode.
FATAL = ("die", "segfault", "sigkill", "sleep")
CONTAINED = ("raise", "unpicklable", *BAD_OUTPUTS)
MOVES = ("up", "down", "left", "right", "bad move")


_BAD_CAUSES = {
    "none_obs": "observation is None",
    "bytes_obs": "(bytes), expected str",
    "list_info": "expected a dict",
    "nan_reward": "reward is nan",
    "str_reward": "reward is '1.0'",
    "str_flag": "terminated is 'no'",
    "int_flag": "truncated is 0",
}


def expected_cause(fault: str, backend: str) -> str:
    """Text the cut episode's ``info["error"]`` must contain for ``fault``."""
    if fault == "raise":
        return "RuntimeError: boom"
    if fault in _BAD_CAUSES:
        return _BAD_CAUSES[fault]
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
    slack_s: float = 5.0,
) -> Counter:
    """Counts: tried (faults injected), clear_error, crashed, hung, collateral, wrong_cause,
    restarts and replayed (episodes restored on restarted workers).

    A step counts as hung when it takes longer than its deadlines plus ``slack_s`` seconds, times
    one plus its fatal faults (each restarts a worker). ``slack_s`` is the allowance for starting a
    worker; a Ray actor on a loaded 2-core machine needs more than a forked process."""
    rng = random.Random(seed)
    counts: Counter = Counter()
    with make_pool() as pool:
        pool.reset(seeds=list(range(num_envs)))
        for r in range(rounds):
            actions = [
                rng.choice(FATAL + CONTAINED) if rng.random() < fault_rate else rng.choice(MOVES)
                for _ in range(num_envs)
            ]
            n_fatal = sum(a in FATAL for a in actions)
            counts["tried"] += sum(a in FATAL + CONTAINED for a in actions)
            start = time.monotonic()
            try:
                results = pool.step(range(num_envs), actions)
            except Exception as exc:  # the contract says this never happens
                counts["crashed"] += 1
                counts[f"crash: {type(exc).__name__}: {exc}"[:200]] += 1
                break
            per_worker = -(-num_envs // num_groups)  # the deadline is per env of a worker
            if time.monotonic() - start > (timeout * per_worker + slack_s) * (1 + n_fatal):
                counts["hung"] += 1
            cut = []
            for i, (a, res) in enumerate(zip(actions, results)):
                error = res.info.get("error", "")
                if a in FATAL + CONTAINED:
                    ok = res.truncated and expected_cause(a, backend) in error
                    counts["clear_error" if ok else "wrong_cause"] += 1
                elif res.truncated and error:
                    counts["collateral"] += 1
                    counts[f"collateral: {a}: {error}"[:240]] += 1
                if res.truncated or res.terminated:
                    cut.append(i)
            if cut:
                pool.reset(cut, seeds=[1000 * (r + 1) + i for i in cut])
        counts["restarts"] = pool.restarts
        counts["replayed"] = pool.replayed
    return counts
