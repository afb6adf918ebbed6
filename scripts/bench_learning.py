"""Multi-seed learning benchmark: train a config for K seeds and aggregate held-out success.

Each run is ``python -m agentrl.train seed=S output_dir=... <overrides>`` in a subprocess (so the
benchmark depends only on the command line and the run folder's ``metrics.jsonl``, not on the
trainer's internals). As many runs go at once as there are cores (``--jobs``), each with one
torch thread unless the overrides set ``trainer.num_threads``. Per run the CPU time of the whole
process (user + system, from ``wait4``) is recorded.

Outputs in ``--out``: ``table.md`` (per seed: initial, every held-out evaluation and final success
with 95 % Wilson intervals, CPU minutes; across seeds: mean with its bootstrap interval, min,
max; with ``--compare``, every config's difference of mean final success to the first config with
bootstrap intervals, unpaired and paired by seed), ``curves.png`` (held-out success per seed thin,
mean bold, band = bootstrap interval of the mean), ``curves_wall.png`` (the same against training wall-clock minutes) and
``results.json``. A finished run whose command is unchanged is reused,
so an interrupted benchmark continues where it stopped (``--fresh`` reruns everything).

Examples::

    python scripts/bench_learning.py                                   # the no-argument default, 5 seeds
    python scripts/bench_learning.py --seeds report                    # the 10 report seeds (1000-1009)
    python scripts/bench_learning.py trainer.num_threads=2             # same, two threads per run
    python scripts/bench_learning.py --compare credit=grpo credit=gigpo --seeds 5
    python scripts/bench_learning.py --seeds 2 --compare credit=grpo credit=gigpo -- \\
        trainer.iterations=2 env.eval_episodes=8 trainer.eval_every=1

Seeds: ``--seeds N`` (N seeds from ``--seed-start``), a named set (``tuning``: 0-9, what tuning and
screening may look at; ``report``: 1000-1009, fixed up front, for headline figures only; ``report:5``
its first five) or a list (``1000-1004,1007``). The table's heading names the seeds it used.

Overrides for every config go before ``--compare`` or after a ``--`` that ends its list: without
it they would be read as more configs. The plan (configs, common overrides) is printed first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agentrl.evaluation.multiseed import (
    SEED_SETS,
    RunResult,
    bootstrap_diff_ci,
    bootstrap_paired_diff_ci,
    fmt_rate_ci,
    mean_curve,
    parse_seeds,
    read_run,
    summarize_runs,
    targets,
)

ROOT = Path(__file__).resolve().parents[1]

QUIET = ["trainer.progress=false", "trainer.loggers=[]", "trainer.plot=false"]


def label_of(overrides: list[str]) -> str:
    """A config's name in tables: its overrides (``default`` when there are none)."""
    return " ".join(overrides) if overrides else "default"


def folder_of(label: str) -> str:
    """A folder name for a label that Hydra accepts inside an override value (no ``=``)."""
    return re.sub(r"[^A-Za-z0-9_.+,-]+", "_", label)


def run_command(overrides: list[str], seed: int, folder: Path, threads: int | None) -> list[str]:
    cmd = [sys.executable, "-m", "agentrl.train", f"seed={seed}", f"output_dir={folder}", *QUIET]
    if threads is not None and not any(o.startswith("trainer.num_threads=") for o in overrides):
        cmd.append(f"trainer.num_threads={threads}")
    return cmd + list(overrides)


def _run_one(cmd: list[str], folder: Path, fresh: bool) -> tuple[float | None, int]:
    """Run (or reuse) one training run -> (CPU seconds of the whole process, return code)."""
    stamp = folder / "bench_run.json"
    if not fresh and stamp.is_file() and (folder / "summary.json").is_file():
        prev = json.loads(stamp.read_text())
        if prev.get("cmd") == cmd[1:] and prev.get("returncode") == 0:
            return prev.get("cpu_s"), 0
    folder.mkdir(parents=True, exist_ok=True)
    log = folder.parent / f"{folder.name}.log"
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT)
        cpu: float | None = None
        if hasattr(os, "wait4"):
            _, status, ru = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            cpu = ru.ru_utime + ru.ru_stime
        else:  # pragma: no cover (no per-child rusage on this platform)
            proc.wait()
    rc = int(proc.returncode)
    stamp.write_text(
        json.dumps(
            {
                "cmd": cmd[1:],
                "returncode": rc,
                "cpu_s": cpu,
                "wall_s": time.perf_counter() - t0,
            }
        )
    )
    if rc != 0:
        print(f"run failed (exit {rc}): {shlex.join(cmd)}; log: {log}", file=sys.stderr)
    return cpu, rc


def run_all(
    configs: dict[str, list[str]],
    seeds: list[int],
    out: Path,
    jobs: int,
    threads: int | None,
    fresh: bool,
) -> dict[str, list[RunResult]]:
    """Every (config, seed) run, ``jobs`` at a time; returns the successful runs per config."""
    plan = [
        (label, seed, (out / folder_of(label) / f"seed_{seed}").resolve())
        for label in configs
        for seed in seeds  # seeds interleave per config: an early stop leaves balanced configs
    ]
    plan.sort(key=lambda p: (seeds.index(p[1]), list(configs).index(p[0])))
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {
            (label, seed): pool.submit(
                _run_one, run_command(configs[label], seed, folder, threads), folder, fresh
            )
            for label, seed, folder in plan
        }
        results: dict[str, list[RunResult]] = {label: [] for label in configs}
        for label, seed, folder in plan:
            cpu, rc = futures[(label, seed)].result()
            if rc == 0:
                results[label].append(read_run(folder, seed, cpu))
    for label in results:
        results[label].sort(key=lambda r: r.seed)
    return results


# -- reporting ---------------------------------------------------------------------------------
def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def seed_table(runs: list[RunResult]) -> str:
    its = sorted({e.iteration for r in runs for e in r.evals if e.phase == "eval"})
    head = [
        "seed",
        "initial",
        *[f"iter {i}" for i in its],
        "final",
        "gain (points)",
        "best",
        "CPU min",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in runs:
        by_it = {e.iteration: e for e in r.evals if e.phase == "eval"}
        ini = r.initial
        gain = f"{r.improvement_points():+.1f}" + (" (disjoint)" if r.disjoint() else " (overlap)")
        cells = [
            str(r.seed),
            fmt_rate_ci(ini) if ini else "—",
            *[fmt_rate_ci(by_it[i]) if i in by_it else "—" for i in its],
            f"**{fmt_rate_ci(r.final)}**",
            gain if ini else "—",
            f"{_pct(r.best.rate)} (iter {r.best.iteration})",
            f"{r.cpu_s / 60:.1f}" if r.cpu_s is not None else "—",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def across_table(summaries: dict[str, dict[str, dict[str, float]]], counts: dict[str, int]) -> str:
    head = [
        "config",
        "seeds",
        "initial",
        "final: mean [95 % bootstrap CI]",
        "final min-max",
        "gain (points)",
        "drop from best (points, max)",
        "CPU min (mean, max)",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, s in summaries.items():
        f = s["final"]
        ini = s.get("initial")
        gain = s.get("improvement_points")
        cpu = s.get("cpu_min")
        lines.append(
            "| "
            + " | ".join(
                [
                    f"`{label}`",
                    str(counts[label]),
                    f"{_pct(ini['mean'])} %" if ini else "—",
                    f"**{_pct(f['mean'])} %** [{_pct(f['ci_low'])}, {_pct(f['ci_high'])}]",
                    f"{_pct(f['min'])}-{_pct(f['max'])} %",
                    f"{gain['mean']:+.1f} (min {gain['min']:+.1f})" if gain else "—",
                    f"{s['drop_from_best_points']['max']:.1f}",
                    f"{cpu['mean']:.1f}, {cpu['max']:.1f}" if cpu else "—",
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def _excludes_zero(lo: float, hi: float) -> str:
    return "yes" if lo > 0 or hi < 0 else "no"


def diff_table(results: dict[str, list[RunResult]], confidence: float) -> tuple[str, list[dict]]:
    labels = [k for k, v in results.items() if v]
    base = labels[0]
    rows = []
    lines = [
        f"| config | mean final minus `{base}` (points) | {100 * confidence:g} % bootstrap CI |"
        " CI excludes 0 | paired by seed: seeds, mean difference [CI] |",
        "|---|---|---|---|---|",
    ]
    for label in labels[1:]:
        d, lo, hi = bootstrap_diff_ci(
            [r.final.rate for r in results[label]],
            [r.final.rate for r in results[base]],
            confidence,
        )
        row = {"config": label, "base": base, "diff": d, "ci_low": lo, "ci_high": hi}
        # Paired: the seeds both configs finished (each pair shares the seed's env tasks and init).
        mine = {r.seed: r.final.rate for r in results[label]}
        theirs = {r.seed: r.final.rate for r in results[base]}
        both = sorted(set(mine) & set(theirs))
        paired = "-"
        if both:
            pd, plo, phi = bootstrap_paired_diff_ci(
                [mine[s] for s in both], [theirs[s] for s in both], confidence
            )
            row.update(paired_seeds=both, paired_diff=pd, paired_ci_low=plo, paired_ci_high=phi)
            paired = (
                f"{len(both)}, {100 * pd:+.1f} [{100 * plo:+.1f}, {100 * phi:+.1f}]"
                f" (excludes 0: {_excludes_zero(plo, phi)})"
            )
        rows.append(row)
        lines.append(
            f"| `{label}` | {100 * d:+.1f} | [{100 * lo:+.1f}, {100 * hi:+.1f}] |"
            f" {_excludes_zero(lo, hi)} | {paired} |"
        )
    return "\n".join(lines), rows


def _wall_minutes(run: RunResult, iteration: int) -> float | None:
    """Training wall-clock minutes up to ``iteration`` (``time/iteration_s`` summed; the
    evaluations themselves not counted), None when the run did not record it."""
    s = run.extra.get("train_wall_at", {}).get(iteration)
    return None if s is None else s / 60


def plot(results: dict[str, list[RunResult]], path: Path, title: str, wall: bool = False) -> None:
    """Held-out success per seed (thin) and the mean per config (bold), against the iteration or,
    with ``wall``, against the training wall-clock (what a faster loop buys; the mean curve at
    each evaluation's mean wall time, no band)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def x_of(run: RunResult, iteration: int) -> float | None:
        return _wall_minutes(run, iteration) if wall else iteration

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, (label, runs) in enumerate(results.items()):
        if not runs:
            continue
        c = colors[k % len(colors)]
        for r in runs:
            pts = [(x, e.rate) for e in r.evals if (x := x_of(r, e.iteration)) is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), color=c, lw=0.7, alpha=0.45)
        curve = []
        for it, m, lo, hi in mean_curve(runs):
            xs = [x_of(r, it) for r in runs]
            if None not in xs:
                curve.append((sum(xs) / len(xs), m, lo, hi))
        if curve:
            x, m, lo, hi = zip(*curve, strict=True)
            ax.plot(x, m, color=c, lw=2.5, marker="o", label=f"{label} (mean of {len(runs)} seeds)")
            if not wall:  # the band is over seeds at one iteration, not at one wall time
                ax.fill_between(x, lo, hi, color=c, alpha=0.15, lw=0)
    ax.set_xlabel("training wall-clock (minutes; evaluations not counted)" if wall else "iteration")
    ax.set_ylabel("held-out greedy success")
    ax.set_ylim(0, 1)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def report(
    results: dict[str, list[RunResult]],
    configs: dict[str, list[str]],
    common: list[str],
    out: Path,
    confidence: float,
    thresholds: dict[str, float] | None,
    argv: list[str],
) -> str:
    summaries: dict[str, dict[str, dict[str, float]]] = {}
    for label, runs in results.items():
        if runs:
            summaries[label] = summarize_runs(runs, confidence)
    parts = [
        "# Learning benchmark",
        "",
        "Command: `python scripts/bench_learning.py "
        + shlex.join(argv)
        + "`; common overrides: "
        + (f"`{' '.join(common)}`" if common else "none")
        + ". Held-out greedy success with 95 % Wilson intervals; across seeds the mean with a"
        " percentile-bootstrap interval of the mean (10,000 resamples).",
        "",
        "Seeds: " + seeds_text(sorted({r.seed for runs in results.values() for r in runs})) + ".",
        "",
        "## Across seeds",
        "",
        across_table(summaries, {k: len(v) for k, v in results.items()}),
    ]
    diffs: list[dict] = []
    if len(summaries) > 1:
        text, diffs = diff_table(results, confidence)
        parts += [
            "",
            "## Difference of mean final success (bootstrap over seeds: unpaired, and paired by seed)",
            "",
            text,
        ]
    checks: dict[str, dict[str, bool]] = {}
    if thresholds is not None:
        parts += [
            "",
            "## Targets (named checks of the thresholds given, not part of the figures)",
            "",
        ]
        for label, runs in results.items():
            if runs:
                checks[label] = targets(runs, confidence=confidence, **thresholds)
                parts.append(
                    f"- `{label}`: "
                    + "; ".join(f"{k}: {'pass' if v else 'FAIL'}" for k, v in checks[label].items())
                )
    for label, runs in results.items():
        parts += ["", f"## Per seed: `{label}`", ""]
        parts.append(seed_table(runs) if runs else "(no run finished)")
    text = "\n".join(parts) + "\n"
    (out / "table.md").write_text(text)
    (out / "results.json").write_text(
        json.dumps(
            {
                "argv": argv,
                "common": common,
                "configs": configs,
                "summaries": summaries,
                "differences": diffs,
                "targets": checks,
                "runs": {
                    label: [
                        {
                            "seed": r.seed,
                            "cpu_s": r.cpu_s,
                            "train_cpu_s": r.train_cpu_s,
                            "iterations": r.iterations,
                            "evals": [
                                {
                                    "iteration": e.iteration,
                                    "phase": e.phase,
                                    "successes": e.successes,
                                    "episodes": e.episodes,
                                    "rate": e.rate,
                                    "ci": e.ci(confidence),
                                }
                                for e in r.evals
                            ],
                        }
                        for r in runs
                    ]
                    for label, runs in results.items()
                },
            },
            indent=1,
        )
    )
    title = "python -m agentrl.train " + " ".join(common) if common else "python -m agentrl.train"
    plot(results, out / "curves.png", title)
    plot(results, out / "curves_wall.png", title, wall=True)
    return text


def seeds_text(seeds: list[int]) -> str:
    """``[1000, 1001, 1002, 1007]`` as ``1000-1002, 1007``, naming the set it is, if one."""
    named = [k for k, v in SEED_SETS.items() if list(v) == sorted(seeds)]
    runs: list[list[int]] = []
    for s in sorted(seeds):
        if runs and s == runs[-1][-1] + 1:
            runs[-1].append(s)
        else:
            runs.append([s])
    text = ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)
    return f"{text} (the {named[0]} set)" if named else text


def plan_text(labels: list[str], common: list[str], seeds: list[int]) -> str:
    """What is about to run, so that overrides read as configs (a missing ``--``) show at once."""
    lines = [f"{len(labels)} config(s) x {len(seeds)} seed(s) ({seeds_text(seeds)}):"]
    lines += [f"  {i}. {label}" for i, label in enumerate(labels, 1)]
    lines.append("common overrides: " + (" ".join(common) if common else "none"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("overrides", nargs="*", help="Hydra overrides applied to every config")
    ap.add_argument(
        "--compare",
        nargs="+",
        metavar="CONFIG",
        default=None,
        help="configs side by side, each one quoted string of overrides (e.g. credit=grpo "
        "'credit=gigpo trainer.lr=3e-4'); the first is the base of the differences; end the "
        "list with -- when common overrides follow",
    )
    ap.add_argument(
        "--seeds",
        default="5",
        help="a count (from --seed-start), a named set (tuning: 0-9, report: 1000-1009, "
        "report:5 for its first five) or a list like 1000-1004,1007 (default 5)",
    )
    ap.add_argument("--seed-start", type=int, default=0, help="first seed (default 0)")
    ap.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="runs at once (default: cores)"
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="trainer.num_threads per run unless the overrides set it (default 1)",
    )
    ap.add_argument("--out", type=Path, default=Path("runs/bench_learning"), help="output folder")
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--fresh", action="store_true", help="rerun runs that already finished")
    ap.add_argument(
        "--check-targets",
        action="store_true",
        help="add pass/fail checks: every seed gains --target-gain points with disjoint "
        "intervals, mean final >= --target-mean %%, every final within --target-drop points of "
        "its best, every run <= --target-cpu CPU min (defaults: the default run's targets, "
        "25, 60, 10, 10)",
    )
    ap.add_argument("--target-gain", type=float, default=25.0, metavar="POINTS")
    ap.add_argument("--target-mean", type=float, default=60.0, metavar="PERCENT")
    ap.add_argument("--target-drop", type=float, default=10.0, metavar="POINTS")
    ap.add_argument("--target-cpu", type=float, default=10.0, metavar="MINUTES")
    ap.add_argument(
        "--target-min",
        type=float,
        default=0.0,
        metavar="PERCENT",
        help="also check every seed's final >= PERCENT (default 0: no such check)",
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    try:
        seeds = parse_seeds(args.seeds, args.seed_start)
    except ValueError as exc:
        ap.error(str(exc))
    if args.jobs < 1:
        ap.error("--jobs must be at least 1")
    specs = [shlex.split(c) for c in args.compare] if args.compare else [[]]
    configs: dict[str, list[str]] = {}
    for spec in specs:
        label = label_of(spec)
        if label in configs:
            ap.error(f"--compare lists the config {spec} twice")
        configs[label] = [*args.overrides, *spec]
    print(plan_text(list(configs), args.overrides, seeds), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    results = run_all(configs, seeds, args.out, args.jobs, args.threads, args.fresh)
    missing = {k: len(seeds) - len(v) for k, v in results.items() if len(v) < len(seeds)}
    if all(not v for v in results.values()):
        print("no run finished; see the logs in " + str(args.out), file=sys.stderr)
        return 1
    thresholds = (
        {
            "min_gain_points": args.target_gain,
            "min_mean_final": args.target_mean / 100.0,
            "max_drop_points": args.target_drop,
            "max_cpu_min": args.target_cpu,
            "min_seed_final": args.target_min / 100.0,
        }
        if args.check_targets
        else None
    )
    text = report(results, configs, args.overrides, args.out, args.confidence, thresholds, argv)
    print(text)
    print(
        f"{sum(len(v) for v in results.values())} runs in {time.perf_counter() - t0:.0f} s wall; outputs: {args.out}"
    )
    if missing:
        print(f"failed runs per config: {missing}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
