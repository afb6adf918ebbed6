"""``python -m agentrl.plot RUN_DIR [RUN_DIR ...]``: evaluation curves of several runs, per category.

Reads each run's ``metrics.jsonl`` (one JSON object per line, written by the trainer) and draws
one panel per env and task category, one line per run, with the 95 % Wilson band of the success
rate: e.g. GRPO vs GiGPO side by side. Evaluation metrics are the keys written by
``Report.metrics(prefix)`` (``eval/<env>/<category>/success_rate``...). Lines that are not valid
JSON (a run killed mid-write) are skipped with a message on stderr naming the file and line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .evaluation.charts import plot_curves
from .evaluation.report import STATS

__all__ = ["load_metrics", "main"]

X_KEYS = ("step", "iteration", "iter", "global_step")


def load_metrics(run: str | Path) -> list[dict[str, Any]]:
    """The rows of ``run/metrics.jsonl`` (or of ``run`` itself if it is a file)."""
    path = Path(run)
    if path.is_dir():
        path = path / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} does not exist (expected a run directory with metrics.jsonl)"
        )
    rows = []
    with path.open() as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                print(f"plot: {path}:{n}: not valid JSON, line skipped", file=sys.stderr)
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def _x_key(runs: dict[str, list[dict[str, Any]]], prefix: str) -> str:
    """The first of :data:`X_KEYS` present in the rows that carry evaluation metrics."""
    for key in X_KEYS:
        if any(
            key in row
            for rows in runs.values()
            for row in rows
            if any(k.startswith(prefix + "/") for k in row)
        ):
            return key
    raise ValueError(
        f"no x column ({', '.join(X_KEYS)}) in the rows with '{prefix}/' metrics; give --x"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agentrl.plot", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "runs", nargs="+", help="run directories (each with metrics.jsonl) or metrics.jsonl files"
    )
    parser.add_argument(
        "--labels", nargs="+", help="one legend label per run (default: the directory names)"
    )
    parser.add_argument("--metric", default="success_rate", choices=STATS, help="statistic to draw")
    parser.add_argument(
        "--x", default=None, help=f"x column (default: the first of {', '.join(X_KEYS)})"
    )
    parser.add_argument(
        "--prefix", default="eval", help="metric prefix the trainer used (default: eval)"
    )
    parser.add_argument("--title", default=None)
    parser.add_argument(
        "-o", "--out", default="curves.png", help="output PNG (default: curves.png)"
    )
    args = parser.parse_args(argv)
    labels = args.labels or [
        Path(r).resolve().name if Path(r).is_dir() else Path(r).resolve().parent.name
        for r in args.runs
    ]
    if len(labels) != len(args.runs):
        parser.error(f"{len(labels)} labels for {len(args.runs)} runs")
    if len(set(labels)) != len(labels):
        labels = [f"{lab} ({i})" for i, lab in enumerate(labels)]
    try:
        runs = {lab: load_metrics(r) for lab, r in zip(labels, args.runs)}
        x = args.x or _x_key(runs, args.prefix)
        plot_curves(runs, args.out, metric=args.metric, x=x, prefix=args.prefix, title=args.title)
    except (FileNotFoundError, ValueError) as exc:
        print(f"plot: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
