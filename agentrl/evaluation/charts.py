"""Charts: success-rate bars with Wilson intervals, and evaluation curves over training.

Figures are built with ``matplotlib.figure.Figure`` directly (no pyplot, no global backend
state) and saved as PNG without a timestamp, so the same data gives the same file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .groups import ALL, parse_metric_key

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .groups import ReportView

__all__ = ["curve_series", "plot_bars", "plot_curves"]

_SCALE = {
    "success_rate": 100.0,
    "success_ci_low": 100.0,
    "success_ci_high": 100.0,
    "mean_score": 100.0,
    "invalid_action_rate": 100.0,
}
_YLABEL = {
    "success_rate": "success % (95% Wilson CI)",
    "mean_score": "mean score ×100",
    "invalid_action_rate": "invalid actions %",
    "mean_steps": "mean steps",
    "mean_return": "mean return",
}


def _save(fig: Figure, path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": None})


def plot_bars(
    reports: Sequence[ReportView],
    path: str | Path | None = None,
    labels: Sequence[str] | None = None,
    title: str | None = None,
    max_width: float = 16.0,
) -> Figure:
    """Bars of success % per env and category (plus each env's ``all``), one bar per report,
    with the reports' Wilson intervals as error bars and the value written on each bar.

    Several reports (e.g. ``random`` vs ``expert`` vs a trained model) share the axes; ``labels``
    names them in the legend (default: ``meta["agent"]`` or ``report i``). Envs sit side by
    side, or one per row when that would be wider than ``max_width`` inches.
    """
    from matplotlib.figure import Figure

    if not reports:
        raise ValueError("plot_bars needs at least one report")
    labels = (
        list(labels)
        if labels is not None
        else [str(r.meta.get("agent", f"report {i}")) for i, r in enumerate(reports)]
    )
    if len(labels) != len(reports):
        raise ValueError(f"{len(labels)} labels for {len(reports)} reports")
    envs = list(dict.fromkeys(e for r in reports for e in r.envs))
    cats = {
        e: list(dict.fromkeys(c for r in reports if e in r.envs for c in r.categories(e))) + [ALL]
        for e in envs
    }
    width_units = [len(cats[e]) for e in envs]
    per_cat = 0.55 + 0.45 * len(reports)
    wide = 1.2 + per_cat * sum(width_units)
    stacked = wide > max_width and len(envs) > 1
    if not stacked:  # envs side by side
        fig = Figure(figsize=(max(5.0, wide), 4.2), layout="constrained")
        axes = list(fig.subplots(1, len(envs), squeeze=False, width_ratios=width_units)[0])
    else:  # one env per row, so the chart stays readable
        fig = Figure(
            figsize=(max(5.0, 1.2 + per_cat * max(width_units)), 3.4 * len(envs)),
            layout="constrained",
        )
        axes = list(fig.subplots(len(envs), 1, squeeze=False)[:, 0])
        for ax in axes:
            ax.set_xlim(-0.6, max(width_units) - 0.4)
    bar_w = 0.8 / len(reports)
    colors = [f"C{i}" for i in range(len(reports))]
    for ax, env in zip(axes, envs):
        xs = list(range(len(cats[env])))
        for j, (rep, label) in enumerate(zip(reports, labels)):
            pos, val, lo, hi = [], [], [], []
            for x, cat in zip(xs, cats[env]):
                try:
                    g = rep.get(env, cat)
                except KeyError:
                    continue
                pos.append(x - 0.4 + bar_w * (j + 0.5))
                val.append(100 * g.success_rate)
                lo.append(100 * (g.success_rate - g.success_ci_low))
                hi.append(100 * (g.success_ci_high - g.success_rate))
            if not pos:
                continue
            ax.bar(
                pos,
                val,
                bar_w * 0.92,
                yerr=[lo, hi],
                capsize=3,
                color=colors[j],
                label=label,
                error_kw={"elinewidth": 1, "ecolor": "0.2"},
            )
            for p, v, h in zip(pos, val, hi):  # the value, above the interval's upper end
                ax.text(p, v + h + 1.5, f"{v:.1f}", ha="center", va="bottom", fontsize=7)
        ticks = []
        for cat in cats[env]:
            ns = {rep.get(env, cat).episodes for rep in reports if _has(rep, env, cat)}
            ticks.append(f"{_wrap(cat)}\nn={ns.pop()}" if len(ns) == 1 else _wrap(cat))
        ax.set_xticks(xs, ticks, fontsize=8)
        ax.set_ylim(0, 115)
        ax.set_yticks(range(0, 101, 20))
        ax.set_title(env, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    for ax in axes if stacked else axes[:1]:
        ax.set_ylabel("success % (95% Wilson CI)")
    if len(reports) > 1:
        from matplotlib.patches import Patch

        handles = [Patch(color=c, label=lab) for c, lab in zip(colors, labels)]
        fig.legend(handles=handles, loc="outside right upper", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=11)
    if path is not None:
        _save(fig, path)
    return fig


def _wrap(label: str, width: int = 14) -> str:
    """Long snake_case category names (ALFWorld's task types) over several lines."""
    if len(label) <= width or "_" not in label:
        return label
    lines, cur = [], ""
    for part in label.split("_"):
        piece = part if not cur else "_" + part
        if cur and len(cur) + len(piece) > width:
            lines.append(cur + "_")
            cur = part
        else:
            cur += piece
    return "\n".join(lines + [cur])


def _has(rep: ReportView, env: str, cat: str) -> bool:
    try:
        rep.get(env, cat)
    except KeyError:
        return False
    return True


def curve_series(
    rows: Sequence[Mapping[str, Any]],
    metric: str = "success_rate",
    x: str = "step",
    prefix: str = "eval",
) -> dict[tuple[str, str], dict[str, list[float]]]:
    """Per (env, category): ``{"x": [...], "y": [...], "low": [...], "high": [...]}`` from
    ``metrics.jsonl`` rows (one dict per line). Rows without the ``x`` key or without any
    evaluation metric are skipped; ``low``/``high`` are filled for ``success_rate`` only.
    """
    out: dict[tuple[str, str], dict[str, list[float]]] = {}
    for row in rows:
        if x not in row:
            continue
        found: dict[tuple[str, str], dict[str, float]] = {}
        for key, value in row.items():
            parsed = parse_metric_key(key, prefix)
            if parsed is None or not isinstance(value, int | float) or isinstance(value, bool):
                continue
            env, cat, stat = parsed
            found.setdefault((env, cat), {})[stat] = float(value)
        for group, stats in found.items():
            if metric not in stats or not math.isfinite(stats[metric]):
                continue
            s = out.setdefault(group, {"x": [], "y": [], "low": [], "high": []})
            s["x"].append(float(row[x]))
            s["y"].append(stats[metric])
            if (
                metric == "success_rate"
                and "success_ci_low" in stats
                and "success_ci_high" in stats
            ):
                s["low"].append(stats["success_ci_low"])
                s["high"].append(stats["success_ci_high"])
    for s in out.values():  # a band needs every point
        if len(s["low"]) != len(s["y"]):
            s["low"], s["high"] = [], []
    return out


def _panel_order(groups: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    envs = list(dict.fromkeys(e for e, _ in groups if e != ALL))
    ordered = []
    for env in envs:
        cats = [c for e, c in groups if e == env and c != ALL]
        ordered += [(env, c) for c in cats] + ([(env, ALL)] if (env, ALL) in groups else [])
    if (ALL, ALL) in groups and len(envs) != 1:
        ordered.append((ALL, ALL))
    return ordered


def plot_curves(
    runs: Mapping[str, Sequence[Mapping[str, Any]]],
    path: str | Path | None = None,
    metric: str = "success_rate",
    x: str = "step",
    prefix: str = "eval",
    title: str | None = None,
) -> Figure:
    """One panel per env and category, one line per run (label -> its ``metrics.jsonl`` rows),
    with the Wilson band for ``success_rate``. Raises ``ValueError`` when no run has the metric.
    """
    from matplotlib.figure import Figure

    series = {label: curve_series(rows, metric, x, prefix) for label, rows in runs.items()}
    groups = list(dict.fromkeys(g for s in series.values() for g in s))
    if not groups:
        raise ValueError(f"no '{prefix}/…/{metric}' values with an '{x}' column in any run")
    panels = _panel_order(groups)
    ncols = min(4, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig = Figure(figsize=(3.6 * ncols, 2.9 * nrows + 0.4), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True)
    scale = _SCALE.get(metric, 1.0)
    for k, (env, cat) in enumerate(panels):
        ax = axes[k // ncols][k % ncols]
        for i, (label, s) in enumerate(series.items()):
            data = s.get((env, cat))
            if not data:
                continue
            ys = [scale * v for v in data["y"]]
            ax.plot(data["x"], ys, marker="o", markersize=3, color=f"C{i}", label=label)
            if data["low"]:
                ax.fill_between(
                    data["x"],
                    [scale * v for v in data["low"]],
                    [scale * v for v in data["high"]],
                    color=f"C{i}",
                    alpha=0.15,
                    linewidth=0,
                )
        ax.set_title(
            cat if env == ALL or len({e for e, _ in panels if e != ALL}) == 1 else f"{env} · {cat}",
            fontsize=9,
        )
        if scale == 100.0:
            ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
        if k % ncols == 0:
            ax.set_ylabel(_YLABEL.get(metric, metric), fontsize=8)
        if k // ncols == nrows - 1 or k + ncols >= len(panels):
            ax.set_xlabel(x, fontsize=8)
    for k in range(len(panels), nrows * ncols):
        axes[k // ncols][k % ncols].set_visible(False)
    axes[0][0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=11)
    if path is not None:
        _save(fig, path)
    return fig
