"""What trajectory traces cost the default run: the default config with traces on and off.

    python scripts/bench_traces.py [--iterations 4] [--repeats 3] [hydra overrides ...]

Runs the trainer on the default config (no initial evaluation, a final one on 16 held-out tasks,
no trackers or plot, so that the traces are what differs) for ``--iterations`` iterations, in one
process, alternating ``trainer.traces.every=1`` (every iteration traced: the worst case) and
``trainer.traces.every=0`` (none), ``--repeats`` times each. Prints the median wall and CPU
time of each (the process's CPU seconds, which other work on the machine blurs less than the wall
time) and their ratios; the seconds spent inside the tracer itself (choosing rows, recomputing the
credit groups, decoding texts, writing files, and the learner's per-token capture inside the
update); and the overhead this gives the default run, which traces 7 of its 120 iterations
(``trainer.traces.every=20``) and 16 episodes of each of its 6 evaluations: (a traced iteration's
extra seconds x 7 + an evaluation's trace seconds x 6) / (120 x an untraced iteration's seconds),
once from the CPU times and once from the tracer's own seconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hydra import compose, initialize_config_module

import agentrl.recipe as recipe
import agentrl.training.traces as traces
from agentrl.config import load_config
from agentrl.learner.capture import TokenCapture
from agentrl.training.traces import Tracer

SPENT = {"train": 0.0, "eval": 0.0, "evals": 0}


class TimedCapture(TokenCapture):
    """The learner's per-token capture, timing its calls (inside the update)."""

    def take(self, *a, **k):
        t = time.perf_counter()
        try:
            return super().take(*a, **k)
        finally:
            SPENT["train"] += time.perf_counter() - t


class TimedTracer(Tracer):
    """The tracer, timing its own calls."""

    def before_update(self, *a, **k):
        t = time.perf_counter()
        try:
            return super().before_update(*a, **k)
        finally:
            SPENT["train"] += time.perf_counter() - t

    def after_update(self, *a, **k):
        t = time.perf_counter()
        try:
            return super().after_update(*a, **k)
        finally:
            SPENT["train"] += time.perf_counter() - t

    def evaluation(self, *a, **k):
        t = time.perf_counter()
        try:
            return super().evaluation(*a, **k)
        finally:
            SPENT["eval"] += time.perf_counter() - t
            SPENT["evals"] += 1


def run(iterations: int, every: int, extra: list[str]) -> tuple[float, float]:
    overrides = [f"trainer.iterations={iterations}", "trainer.eval_initial=false",
                 "env.eval_episodes=16", "trainer.progress=false", "trainer.loggers=[]",
                 "trainer.plot=false", "trainer.checkpoint_every=0",
                 f"trainer.traces.every={every}", *extra]  # fmt: skip
    with initialize_config_module("agentrl.configs", version_base=None):
        cfg = load_config(compose("train", overrides))
    with tempfile.TemporaryDirectory() as out:
        t, c = time.perf_counter(), time.process_time()
        recipe.train(cfg, Path(out))
        return time.perf_counter() - t, time.process_time() - c


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    args, extra = ap.parse_known_args()
    recipe.Tracer = TimedTracer  # the recipe builds this one
    traces.TokenCapture = TimedCapture  # and the tracer this one
    on, off = [], []
    for r in range(args.repeats):
        for every, times in ((0, off), (1, on)) if r % 2 else ((1, on), (0, off)):
            times.append(run(args.iterations, every, extra))
            wall, cpu = times[-1]
            print(f"repeat {r + 1}: traces.every={every}: {wall:.2f} s wall, {cpu:.2f} s CPU",
                  file=sys.stderr)  # fmt: skip
    t_on, t_off = (statistics.median(w for w, _ in x) for x in (on, off))
    c_on, c_off = (statistics.median(c for _, c in x) for x in (on, off))
    n_on = args.repeats * args.iterations
    per_iter_tracer = SPENT["train"] / n_on
    per_eval_tracer = SPENT["eval"] / max(1, SPENT["evals"])
    # an untraced iteration (the final evaluation included: the overheads are upper bounds)
    cpu_run_s, wall_run_s = 120 * c_off / args.iterations, 120 * t_off / args.iterations
    extra_per_traced = max(0.0, (c_on - c_off) / args.iterations)
    default = (7 * extra_per_traced + 6 * per_eval_tracer) / cpu_run_s
    print(f"default config, {args.iterations} iterations, median of {args.repeats}:")
    print(f"  traces off             {t_off:7.2f} s wall {c_off:7.2f} s CPU")
    print(f"  every iteration traced {t_on:7.2f} s wall {c_on:7.2f} s CPU   "
          f"ratio on/off: wall {t_on / t_off:.3f}, CPU {c_on / c_off:.3f}")  # fmt: skip
    print(f"  inside the tracer: {per_iter_tracer * 1000:.0f} ms per traced iteration, "
          f"{per_eval_tracer * 1000:.0f} ms per traced evaluation")  # fmt: skip
    print(f"  default run (7 of 120 iterations and 6 evaluations traced): "
          f"+{100 * default:.2f} % of its time (from the CPU times); "
          f"+{100 * (7 * per_iter_tracer + 6 * per_eval_tracer) / wall_run_s:.2f} % "
          "(from the tracer's own seconds)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
