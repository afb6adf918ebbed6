"""CPU cost of the token shapers and of credit=hiper on batches of the default run's size.

    PYTHONPATH=. python scripts/bench_token_shapers.py

Token shapers: 1,030 agent steps x 36 response tokens (the default run's update, see
docs/benchmarks.md), random signals; reports the median CPU time (``time.process_time``) of
``token_shapers.shape`` per shaper and its ratio to a GiGPO credit computation plus the token
broadcast on the same batch, in the same process. HiPER: ``credit.random_batch`` (about 46k steps,
the size of the credit table in docs/credit.md) with random switch decisions and three value
columns.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
from agentrl.credit import compute, step_to_tokens
from agentrl.credit import token_shapers as ts
from agentrl.credit.hiper import hiper
from agentrl.credit.synthetic import random_batch


def cpu_ms(fn, repeats: int = 7) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return 1000 * float(np.median(times))


def main() -> None:
    rng = np.random.default_rng(0)
    # ~1,030 steps: 22 groups x 8 rollouts, episodes cut at 8 steps
    b = random_batch(22, 8, 8, n_states=12, seed=0)
    n_tok = 36
    step = np.repeat(np.arange(len(b)), n_tok)
    n = len(step)
    tokens = ts.TokenBatch(
        step=step,
        logprob=-rng.exponential(1.0, n),
        ref_logprob=-rng.exponential(1.0, n),
        teacher_logprob=-rng.exponential(1.0, n),
        entropy=rng.exponential(0.5, n),
        self_certainty=rng.exponential(5.0, n),
        token_logit=rng.normal(20, 3, n),
        token_id=rng.integers(0, 50, n),
    )
    adv = compute(b, "gigpo").advantages
    token_step = step.reshape(len(b), n_tok)
    base = cpu_ms(lambda: step_to_tokens(compute(b, "gigpo").advantages, token_step))
    print(f"{len(b)} steps x {n_tok} tokens = {n} tokens")
    print(f"  gigpo + token broadcast: {base:.2f} ms CPU")
    for name in ts.available():
        ms = cpu_ms(lambda name=name: ts.shape(b, adv, tokens, name))
        print(f"  {name:9s} {ms:7.2f} ms CPU  ({ms / base:.2f}x gigpo+broadcast)")

    big = random_batch(seed=1)
    m = len(big)
    big = dataclasses.replace(
        big,
        value=rng.normal(size=m),
        extras={
            "switch": rng.random(m) < 0.3,
            "value_high": rng.normal(size=m),
            "value_term": rng.normal(size=m),
            "subgoal": np.array([f"g{k}" for k in rng.integers(0, 3, m)], dtype=object),
        },
    )
    print(f"hiper on {m} steps: {cpu_ms(lambda: hiper(big), 5):.1f} ms CPU")
    print(f"gae   on {m} steps: {cpu_ms(lambda: compute(big, 'gae'), 5):.1f} ms CPU")


if __name__ == "__main__":
    main()
