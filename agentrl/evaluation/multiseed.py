"""Multi-seed training results: read run folders, aggregate over seeds, compare configs.

One training run is a noisy sample: on the default Sokoban task, held-out success after the
same command differs by tens of points between seeds (and between machines, whose float order
differs). Claims about a config or a credit module therefore rest on several seeds. This module
holds the pure pieces of ``scripts/bench_learning.py``:

- :func:`read_run` turns a run folder (``metrics.jsonl``) into a :class:`RunResult`: the held-out
  evaluations (iteration, successes, episodes, Wilson interval) and the training CPU time;
- :func:`bootstrap_mean_ci`, :func:`bootstrap_diff_ci` and :func:`bootstrap_paired_diff_ci`:
  percentile-bootstrap intervals of a mean over seeds and of a difference of two configs' means
  (seeds resampled independently per config, i.e. unpaired; or the same seeds' pairs resampled
  together);
- :func:`summarize_runs` and :func:`targets` aggregate a config's runs;
- :data:`SEED_SETS` and :func:`parse_seeds`: the named seed sets that keep tuning apart from
  reporting (``tuning``: seeds 0-9, the ones screening, tuning and every benchmark before 2026-12-01 used;
  ``report``: seeds 1000-1009, fixed up front and never used to choose a setting).

With 5 seeds a percentile bootstrap interval is narrower than the nominal 95 % (it cannot reach
beyond the observed values): read it as a description of the spread, not as a guarantee.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .stats import wilson_interval

__all__ = [
    "SEED_SETS",
    "Evaluation",
    "RunResult",
    "bootstrap_diff_ci",
    "bootstrap_mean_ci",
    "bootstrap_paired_diff_ci",
    "bootstrap_means",
    "fmt_rate_ci",
    "mean_curve",
    "parse_seeds",
    "read_run",
    "summarize_runs",
    "targets",
]

EVAL_PHASES = ("eval_initial", "eval", "eval_final")


@dataclass(frozen=True)
class Evaluation:
    """One held-out evaluation of a run: ``successes`` of ``episodes`` after ``iteration`` updates."""

    iteration: int
    successes: int
    episodes: int
    phase: str = "eval"

    @property
    def rate(self) -> float:
        return self.successes / self.episodes if self.episodes else float("nan")

    def ci(self, confidence: float = 0.95) -> tuple[float, float]:
        """Wilson score interval of the success rate."""
        return wilson_interval(self.successes, self.episodes, confidence)


@dataclass
class RunResult:
    """The held-out evaluations of one run (in iteration order) and what it cost."""

    seed: int
    evals: list[Evaluation]
    cpu_s: float | None = None  # whole process (user + system), when measured
    train_cpu_s: float | None = None  # sum of the training iterations' cpu/* columns
    iterations: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def initial(self) -> Evaluation | None:
        return next((e for e in self.evals if e.phase == "eval_initial"), None)

    @property
    def final(self) -> Evaluation:
        if not self.evals:
            raise ValueError(f"run with seed {self.seed} has no held-out evaluation")
        return self.evals[-1]

    @property
    def best(self) -> Evaluation:
        """The evaluation with the highest success rate (the earliest on ties)."""
        if not self.evals:
            raise ValueError(f"run with seed {self.seed} has no held-out evaluation")
        return max(self.evals, key=lambda e: (e.rate, -e.iteration))

    def improvement_points(self) -> float:
        """Final minus initial held-out success, in percentage points (NaN without an initial)."""
        ini = self.initial
        return 100.0 * (self.final.rate - ini.rate) if ini is not None else float("nan")

    def disjoint(self, confidence: float = 0.95) -> bool:
        """Whether the final interval lies entirely above the initial one."""
        ini = self.initial
        return ini is not None and self.final.ci(confidence)[0] > ini.ci(confidence)[1]

    def drop_from_best_points(self) -> float:
        """How far the final evaluation sits below the run's best one, in points (>= 0)."""
        return 100.0 * (self.best.rate - self.final.rate)


SEED_SETS: dict[str, tuple[int, ...]] = {
    "tuning": tuple(range(10)),  # screening and tuning may look at these
    "report": tuple(range(1000, 1010)),  # headline figures only: never used to pick a setting
}


def parse_seeds(spec: str, start: int = 0) -> list[int]:
    """The seeds a ``--seeds`` value names: a set name (``tuning``, ``report``, or its first
    ``N`` seeds as ``report:5``), a count ``N`` (seeds ``start .. start+N-1``), or a
    comma-separated list of seeds and ``a-b`` ranges (``1000-1004,1007``). Raises ``ValueError``
    with a one-line reason on anything else (empty, negative, repeated seeds)."""
    text = spec.strip()
    name, _, count = text.partition(":")
    if name in SEED_SETS:
        seeds = list(SEED_SETS[name])
        if count:
            if not count.isdigit() or not 1 <= int(count) <= len(seeds):
                raise ValueError(f"seed set {name!r} has {len(seeds)} seeds; got {text!r}")
            seeds = seeds[: int(count)]
        return seeds
    if text.isdigit():
        if int(text) < 1:
            raise ValueError("--seeds must name at least one seed")
        return list(range(start, start + int(text)))
    seeds: list[int] = []
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            names = ", ".join(SEED_SETS)
            raise ValueError(
                f"--seeds {spec!r}: expected a count, a set ({names}) or a list like 1000-1004,1007"
            )
        first, last = int(lo), int(hi) if dash else int(lo)
        if last < first:
            raise ValueError(f"--seeds {spec!r}: the range {part.strip()!r} is empty")
        seeds.extend(range(first, last + 1))
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds {spec!r} names a seed twice")
    return seeds


def read_run(folder: str | Path, seed: int, cpu_s: float | None = None) -> RunResult:
    """A run folder's ``metrics.jsonl`` -> :class:`RunResult` (errors name the file and line)."""
    path = Path(folder) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no metrics.jsonl (did the run start?)")
    evals: list[Evaluation] = []
    train_cpu = 0.0
    train_wall = 0.0
    wall_at: dict[int, float] = {0: 0.0}  # iteration -> training wall seconds up to its end
    iterations = 0
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not JSON ({exc})") from None
        phase = row.get("phase")
        if phase == "train":
            iterations = max(iterations, int(row["iteration"]))
            train_cpu += sum(
                float(row.get(f"cpu/{k}_s", 0.0)) for k in ("rollout", "credit", "update")
            )
            train_wall += float(row.get("time/iteration_s", 0.0))
            wall_at[int(row["iteration"])] = train_wall
        elif phase in EVAL_PHASES:
            try:
                eps = int(round(float(row["eval/episodes"])))
                wins = int(round(float(row["eval/success_rate"]) * eps))
                evals.append(Evaluation(int(row["iteration"]), wins, eps, phase))
            except KeyError as exc:
                raise ValueError(f"{path}:{n}: evaluation row without {exc}") from None
    if not evals:
        raise ValueError(
            f"{path}: no held-out evaluation rows (phase eval_initial/eval/eval_final)"
        )
    return RunResult(
        seed,
        evals,
        cpu_s=cpu_s,
        train_cpu_s=train_cpu,
        iterations=iterations,
        extra={"train_wall_at": wall_at},
    )


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def bootstrap_means(values: Sequence[float], n_boot: int = 10_000, seed: int = 0) -> np.ndarray:
    """``n_boot`` means of resamples (with replacement, same size) of ``values``."""
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or len(x) == 0:
        raise ValueError("need a non-empty 1-D list of values")
    if not np.isfinite(x).all():
        raise ValueError(f"values must be finite, got {x.tolist()}")
    idx = _rng(seed).integers(0, len(x), size=(n_boot, len(x)))
    return x[idx].mean(axis=1)


def _percentiles(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    a = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(samples, [a, 1.0 - a], method="inverted_cdf")
    return float(lo), float(hi)


def bootstrap_mean_ci(
    values: Sequence[float], confidence: float = 0.95, n_boot: int = 10_000, seed: int = 0
) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean of ``values`` and its percentile-bootstrap interval."""
    x = np.asarray(values, dtype=float)
    lo, hi = _percentiles(bootstrap_means(x, n_boot, seed), confidence)
    return float(x.mean()), lo, hi


def bootstrap_diff_ci(
    a: Sequence[float],
    b: Sequence[float],
    confidence: float = 0.95,
    n_boot: int = 10_000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``(mean(a) - mean(b), low, high)``: each group resampled on its own (unpaired bootstrap)."""
    ma = bootstrap_means(a, n_boot, seed)
    mb = bootstrap_means(b, n_boot, seed + 1)
    lo, hi = _percentiles(ma - mb, confidence)
    return float(np.mean(a) - np.mean(b)), lo, hi


def bootstrap_paired_diff_ci(
    a: Sequence[float],
    b: Sequence[float],
    confidence: float = 0.95,
    n_boot: int = 10_000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``(mean(a - b), low, high)`` for paired samples (``a[i]`` and ``b[i]`` share seed ``i``):
    the pairs are resampled together, so what the seed decides for both configs cancels."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"paired samples need equal lengths, got {len(x)} and {len(y)}")
    return bootstrap_mean_ci(x - y, confidence, n_boot, seed)


def mean_curve(
    runs: Sequence[RunResult], confidence: float = 0.95, n_boot: int = 10_000, seed: int = 0
) -> list[tuple[int, float, float, float]]:
    """Per evaluation iteration that every run has: ``(iteration, mean, low, high)`` of the
    success rate over runs (bootstrap interval of the mean)."""
    if not runs:
        return []
    common = set.intersection(*({e.iteration for e in r.evals} for r in runs))
    out = []
    for it in sorted(common):
        rates = [next(e.rate for e in r.evals if e.iteration == it) for r in runs]
        out.append((it, *bootstrap_mean_ci(rates, confidence, n_boot, seed)))
    return out


def _stat(values: Sequence[float], confidence: float, n_boot: int, seed: int) -> dict[str, float]:
    m, lo, hi = bootstrap_mean_ci(values, confidence, n_boot, seed)
    return {
        "mean": m,
        "ci_low": lo,
        "ci_high": hi,
        "min": float(min(values)),
        "max": float(max(values)),
    }


def summarize_runs(
    runs: Sequence[RunResult], confidence: float = 0.95, n_boot: int = 10_000, seed: int = 0
) -> dict[str, dict[str, float]]:
    """Across seeds (mean, bootstrap CI of the mean, min, max) of: initial, best and final success
    (rates), improvement and drop from best (points), and CPU minutes (when measured)."""
    if not runs:
        raise ValueError("no runs to summarise")
    out: dict[str, dict[str, float]] = {}
    cols: dict[str, list[float]] = {
        "final": [r.final.rate for r in runs],
        "best": [r.best.rate for r in runs],
        "drop_from_best_points": [r.drop_from_best_points() for r in runs],
    }
    if all(r.initial is not None for r in runs):
        cols["initial"] = [r.initial.rate for r in runs]  # type: ignore[union-attr]
        cols["improvement_points"] = [r.improvement_points() for r in runs]
    measured = [r.cpu_s / 60.0 for r in runs if r.cpu_s is not None]
    if measured:  # over the runs whose CPU time was measured (a reused older run may lack it)
        cols["cpu_min"] = measured
    for k, v in cols.items():
        out[k] = _stat(v, confidence, n_boot, seed)
    return out


def targets(
    runs: Sequence[RunResult],
    *,
    min_gain_points: float = 25.0,
    min_mean_final: float = 0.60,
    max_drop_points: float = 10.0,
    max_cpu_min: float = 10.0,
    min_seed_final: float = 0.0,
    confidence: float = 0.95,
) -> dict[str, bool]:
    """Named pass/fail checks of a config's runs (the thresholds are arguments, not verdicts
    built into the numbers): every seed gains ``min_gain_points`` with disjoint intervals; mean
    final >= ``min_mean_final``; every final within ``max_drop_points`` of its own best; every run
    within ``max_cpu_min`` CPU minutes (over the runs whose CPU time was measured); with
    ``min_seed_final > 0``, every seed's final >= it (the report-seed bar's "every seed at least 65 %")."""
    out = {
        f"every seed >= +{min_gain_points:g} points, intervals disjoint": all(
            r.improvement_points() >= min_gain_points and r.disjoint(confidence) for r in runs
        ),
        f"mean final >= {100 * min_mean_final:g} %": float(np.mean([r.final.rate for r in runs]))
        >= min_mean_final,
        f"every final within {max_drop_points:g} points of its best": all(
            r.drop_from_best_points() <= max_drop_points + 1e-9 for r in runs
        ),
    }
    if min_seed_final > 0:
        out[f"every final >= {100 * min_seed_final:g} %"] = all(
            r.final.rate >= min_seed_final - 1e-12 for r in runs
        )
    measured = [r.cpu_s for r in runs if r.cpu_s is not None]
    if measured:
        out[f"every measured run <= {max_cpu_min:g} CPU min"] = all(
            c / 60.0 <= max_cpu_min for c in measured
        )
    return out


def fmt_rate_ci(e: Evaluation, confidence: float = 0.95) -> str:
    """``"54.5 % [47.6, 61.3]"``."""
    lo, hi = e.ci(confidence)
    return f"{100 * e.rate:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]"
