"""``python -m agentrl.evaluation.compare RESULTS.json ... -o chart.png``: several evaluations in
one chart and one table.

Results files (written by ``python -m agentrl.evaluate``) are grouped by agent label
(``meta["agent"]``, or ``--labels`` one per file); the episodes of one label across files (e.g.
one file per env) are summarised together. The chart has one bar per label for every env and
category; the Markdown table one success column (with its Wilson interval) and one score column
per label.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .charts import plot_bars
from .report import ALL, Report, summarize

__all__ = ["combine", "comparison_table", "main"]


def combine(reports: Sequence[Report], labels: Sequence[str] | None = None) -> dict[str, Report]:
    """label -> one report over the episodes of every report with that label (in order)."""
    labels = (
        list(labels)
        if labels is not None
        else [str(r.meta.get("agent", f"run {i}")) for i, r in enumerate(reports)]
    )
    if len(labels) != len(reports):
        raise ValueError(f"{len(labels)} labels for {len(reports)} results")
    grouped: dict[str, list[Report]] = {}
    for lab, rep in zip(labels, reports):
        grouped.setdefault(lab, []).append(rep)
    out = {}
    for lab, reps in grouped.items():
        conf = {r.confidence for r in reps}
        if len(conf) > 1:
            raise ValueError(f"results of {lab!r} use different confidence levels {sorted(conf)}")
        order: dict[str, list[str]] = {}
        for r in reps:
            for env in r.envs:
                order.setdefault(env, [])
                order[env] += [c for c in r.categories(env) if c not in order[env]]
        records = [rec for r in reps for rec in r.records]
        out[lab] = summarize(
            records,
            meta={"agent": lab, "sources": [r.meta for r in reps]},
            confidence=conf.pop(),
            category_order=order,
        )
    return out


def comparison_table(reports: dict[str, Report]) -> str:
    """Markdown: env, category, episodes, then ``success % [CI]`` and ``score`` per label."""
    labels = list(reports)
    first = next(iter(reports.values()))
    envs = list(dict.fromkeys(e for r in reports.values() for e in r.envs))
    header = (
        ["env", "category", "episodes"]
        + [f"{lab} success % (95% CI)" for lab in labels]
        + [f"{lab} score" for lab in labels]
    )
    if first.confidence != 0.95:
        header = [h.replace("95%", f"{100 * first.confidence:g}%") for h in header]
    lines = [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join(["---"] * 2 + ["---:"] * (len(header) - 2)) + " |",
    ]
    rows = []
    for env in envs:
        cats = list(
            dict.fromkeys(c for r in reports.values() if env in r.envs for c in r.categories(env))
        ) + [ALL]
        rows += [(env, c) for c in cats]
    if len(envs) > 1:
        rows.append((ALL, ALL))
    for env, cat in rows:
        groups = []
        for r in reports.values():
            try:
                groups.append(r.get(env, cat))
            except KeyError:
                groups.append(None)
        ns = {g.episodes for g in groups if g is not None}
        cells = [env, cat, "/".join(str(n) for n in sorted(ns))]
        cells += [
            f"{100 * g.success_rate:.1f} [{100 * g.success_ci_low:.1f}, {100 * g.success_ci_high:.1f}]"
            if g
            else "–"
            for g in groups
        ]
        cells += [f"{100 * g.mean_score:.1f}" if g else "–" for g in groups]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agentrl.evaluation.compare", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "results", nargs="+", help="results.json files of python -m agentrl.evaluate"
    )
    parser.add_argument(
        "--labels", nargs="+", help="one label per file (default: each file's agent)"
    )
    parser.add_argument(
        "-o", "--out", default="comparison.png", help="chart (PNG); the table goes next to it (.md)"
    )
    parser.add_argument("--title", default=None)
    args = parser.parse_args(argv)
    try:
        reports = combine([Report.from_json(p) for p in args.results], args.labels)
    except (OSError, ValueError, KeyError) as exc:
        print(f"compare: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    plot_bars(list(reports.values()), out, labels=list(reports), title=args.title)
    table = comparison_table(reports)
    out.with_suffix(".md").write_text(table)
    print(table, end="")
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
