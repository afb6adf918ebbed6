"""Aggregate the lab's records over seeds and render them: markdown tables and PNG plots."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .metrics import bootstrap_ci

__all__ = [
    "BEGIN",
    "END",
    "HIPER_BEGIN",
    "HIPER_END",
    "aggregate_fidelity",
    "aggregate_learning",
    "fidelity_tables",
    "learning_table",
    "plot_fidelity",
    "plot_learning",
    "splice",
]

BEGIN = "<!-- BEGIN GENERATED: scripts/credit_fidelity.py -->"
END = "<!-- END GENERATED: scripts/credit_fidelity.py -->"
#: Markers of the HiPER section (regenerated on its own with ``--sections hiper``).
HIPER_BEGIN = "<!-- BEGIN GENERATED: scripts/credit_fidelity.py hiper -->"
HIPER_END = "<!-- END GENERATED: scripts/credit_fidelity.py hiper -->"
METRICS = ("pearson", "spearman", "sign", "zero")


def aggregate_fidelity(
    records: list[dict], seed: int = 0
) -> dict[tuple, dict[str, tuple[float, float, float]]]:
    """(env, policy, n, label, gamma) -> metric -> (mean, low, high) over seeds."""
    groups: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        key = (r["env"], r["policy"], r["n"], r["label"], r["gamma"])
        for m in METRICS:
            groups[key][m].append(r[m])
    rng = np.random.default_rng(seed)
    return {
        k: {m: bootstrap_ci(np.array(v), rng) for m, v in ms.items()}
        for k, ms in sorted(groups.items(), key=lambda kv: str(kv[0]))
    }


def aggregate_learning(
    records: list[dict], seed: int = 0, n_boot: int = 2000, baseline: str = "grpo"
) -> dict[tuple, dict]:
    """(env, label) -> episodes axis, mean curve, pointwise 95% bootstrap band, final and
    mean-over-training success (mean, low, high), and the paired difference of the latter from
    ``baseline``'s (same seed, so the same tasks and first batch: the task-set variance cancels)."""
    rng = np.random.default_rng(seed)
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        groups[(r["env"], r["label"])].append(r)
    out = {}
    for key, rs in groups.items():
        curves = np.stack([r["curve"] for r in rs])  # (seeds, iterations + 1)
        if np.isnan(curves).all():
            continue
        idx = rng.integers(0, len(curves), size=(n_boot, len(curves)))
        boots = curves[idx].mean(axis=1)
        lo, hi = np.quantile(boots, [0.025, 0.975], axis=0)
        out[key] = {
            "episodes": np.arange(curves.shape[1]) * rs[0]["episodes_per_iteration"],
            "mean": curves.mean(axis=0),
            "low": lo,
            "high": hi,
            "final": bootstrap_ci(curves[:, -1], rng),
            "auc": bootstrap_ci(curves.mean(axis=1), rng),
            "seeds": len(curves),
            "auc_by_seed": {r["seed"]: float(np.mean(r["curve"])) for r in rs},
            "curve_by_seed": {r["seed"]: np.asarray(r["curve"]) for r in rs},
        }
    for (env, label), a in out.items():
        base = out.get((env, baseline))
        if base is None or label == baseline:
            continue
        common = sorted(set(a["auc_by_seed"]) & set(base["auc_by_seed"]))
        diffs = np.array([a["auc_by_seed"][s] - base["auc_by_seed"][s] for s in common])
        a["auc_vs_baseline"] = bootstrap_ci(diffs, rng)
        paired = np.stack([a["curve_by_seed"][s] - base["curve_by_seed"][s] for s in common])
        boots = paired[rng.integers(0, len(paired), size=(n_boot, len(paired)))].mean(axis=1)
        lo, hi = np.quantile(boots, [0.025, 0.975], axis=0)
        a["vs_baseline"] = {"mean": paired.mean(axis=0), "low": lo, "high": hi}
    return out


def _fmt(ci: tuple[float, float, float] | None, digits: int = 2) -> str:
    if ci is None or not np.isfinite(ci[0]):
        return "n/a"
    m, lo, hi = ci
    return f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def _order(labels: Sequence[str], specs_order: Sequence[str]) -> list[str]:
    rank = {lab: i for i, lab in enumerate(specs_order)}
    return sorted(set(labels), key=lambda lab: (rank.get(lab, len(rank)), lab))


def fidelity_summary(
    agg: dict,
    envs: Sequence[str],
    policies: Sequence[str],
    n: int,
    gamma: float,
    metric: str,
    order: Sequence[str],
) -> str:
    """Compact table: rows estimators, columns env/policy, one metric at one N and gamma."""
    cols = [(e, p) for e in envs for p in policies]
    labels = _order([k[3] for k in agg if k[2] == n and k[4] == gamma], order)
    lines = [
        "| estimator | " + " | ".join(f"{e} / {p}" for e, p in cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for lab in labels:
        cells = [_fmt(agg.get((e, p, n, lab, gamma), {}).get(metric)) for e, p in cols]
        lines.append(f"| {lab} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fidelity_tables(
    agg: dict, env: str, policy: str, gammas: Sequence[float], order: Sequence[str]
) -> str:
    """Full table for one env and policy: rows (estimator, N); Pearson, Spearman, sign per gamma,
    and the zero fraction (which does not depend on gamma)."""
    keys = [k for k in agg if k[0] == env and k[1] == policy]
    labels = _order([k[3] for k in keys], order)
    ns = sorted({k[2] for k in keys})
    head = ["estimator", "N"]
    for g in gammas:
        head += [f"Pearson γ={g:g}", f"Spearman γ={g:g}", f"sign γ={g:g}"]
    head.append("zero")
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---|" * (len(head) - 2)]
    for lab in labels:
        for n in ns:
            cells = [lab, str(n)]
            for g in gammas:
                a = agg.get((env, policy, n, lab, g), {})
                cells += [_fmt(a.get("pearson")), _fmt(a.get("spearman")), _fmt(a.get("sign"))]
            cells.append(_fmt(agg.get((env, policy, n, lab, gammas[0]), {}).get("zero")))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def learning_table(
    agg: dict,
    envs: Sequence[str],
    order: Sequence[str],
    baseline: str = "grpo",
    columns: Sequence[str] = ("final", "auc", "delta"),
) -> str:
    """Per env, the chosen columns: final exact success (``final``), mean success over training
    (``auc``, the area under the curve), and its paired difference from ``baseline`` (``delta``)."""
    names = {"final": "final", "auc": "mean over training", "delta": f"Δ mean vs {baseline}"}
    labels = _order([k[1] for k in agg], order)
    head = ["estimator"]
    for e in envs:
        head += [f"{e}: {names[c]}" if len(envs) > 1 else names[c] for c in columns]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---|" * (len(head) - 1)]
    for lab in labels:
        cells = [lab]
        for e in envs:
            a = agg.get((e, lab))
            for c in columns:
                if a is None:
                    cells.append("n/a")
                elif c == "delta":
                    cells.append("—" if lab == baseline else _fmt(a.get("auc_vs_baseline"), 3))
                else:
                    cells.append(_fmt(a[c]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _style(labels: Sequence[str]) -> dict[str, dict]:
    """Distinct colours and markers per estimator; references dashed."""
    import matplotlib.pyplot as plt

    palette = list(plt.get_cmap("tab10").colors) + list(plt.get_cmap("Dark2").colors)
    markers = "osD^v<>ph*XP"
    return {
        lab: {
            "color": palette[i % len(palette)],
            "marker": markers[i % len(markers)],
            "linestyle": "--" if lab.startswith("ref:") else "-",
        }
        for i, lab in enumerate(labels)
    }


def plot_fidelity(
    agg: dict,
    envs: Sequence[str],
    policies: Sequence[str],
    gammas: Sequence[float],
    order: Sequence[str],
    path: Path,
    metric: str = "pearson",
) -> None:
    """One row per env, one panel per (policy, gamma): ``metric`` vs N with 95% intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = [(p, g) for p in policies for g in gammas]
    labels = _order([k[3] for k in agg], order)
    style = _style(labels)
    all_n = sorted({k[2] for k in agg})
    fig, axes = plt.subplots(
        len(envs), len(cols), figsize=(4.0 * len(cols), 3.3 * len(envs)), squeeze=False, sharey=True
    )
    for ri, e in enumerate(envs):
        for ci, (p, g) in enumerate(cols):
            ax = axes[ri][ci]
            for j, lab in enumerate(labels):
                pts = sorted(
                    (k[2], v[metric])
                    for k, v in agg.items()
                    if k[:2] == (e, p) and k[3] == lab and k[4] == g
                )
                if not pts:
                    continue
                ns = np.array([q[0] for q in pts], dtype=float) * (
                    1 + 0.012 * (j - len(labels) / 2)
                )
                m = np.array([q[1][0] for q in pts])
                err = np.array([[q[1][0] - q[1][1], q[1][2] - q[1][0]] for q in pts]).T
                ax.errorbar(ns, m, yerr=err, label=lab, capsize=2, markersize=4, **style[lab])
            ax.set_xscale("log", base=2)
            ax.set_xticks(all_n, [str(n) for n in all_n])
            ax.set_title(f"{e} / {p}, true A at γ={g:g}", fontsize=9)
            ax.grid(alpha=0.3)
            if ri == len(envs) - 1:
                ax.set_xlabel("rollouts per task (N)")
        axes[ri][0].set_ylabel(f"{metric} with true A")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def plot_learning(
    agg: dict, envs: Sequence[str], order: Sequence[str], path: Path, baseline: str = "grpo"
) -> None:
    """Top: exact success probability vs episodes, mean over seeds with a 95% bootstrap band.
    Bottom: the paired difference from ``baseline`` (same seed), which removes the spread
    between task sets that dominates the top bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = _order([k[1] for k in agg], order)
    style = _style(labels)
    fig, axes = plt.subplots(2, len(envs), figsize=(6 * len(envs), 8.0), squeeze=False)
    for ei, e in enumerate(envs):
        top, bottom = axes[0][ei], axes[1][ei]
        for lab in labels:
            a = agg.get((e, lab))
            if a is None:
                continue
            st = style[lab]
            line = {"color": st["color"], "linestyle": st["linestyle"], "linewidth": 1.4}
            top.plot(a["episodes"], a["mean"], label=lab, **line)
            top.fill_between(a["episodes"], a["low"], a["high"], color=st["color"], alpha=0.08)
            d = a.get("vs_baseline")
            if d is not None:
                bottom.plot(a["episodes"], d["mean"], label=lab, **line)
                bottom.fill_between(
                    a["episodes"], d["low"], d["high"], color=st["color"], alpha=0.08
                )
        top.set_title(f"{e}: tabular softmax policy gradient", fontsize=10)
        top.set_ylabel("exact success probability (mean over tasks)")
        top.set_ylim(0, 1.02)
        bottom.axhline(0.0, color="black", linewidth=0.8)
        bottom.set_title(f"{e}: paired difference from {baseline} (same seeds)", fontsize=10)
        bottom.set_ylabel(f"success minus {baseline}'s")
        for ax in (top, bottom):
            ax.set_xlabel("episodes")
            ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def splice(document: str, generated: str, begin: str = BEGIN, end: str = END) -> str:
    """Replace the text between the ``begin``/``end`` markers (append both when absent)."""
    block = f"{begin}\n{generated.rstrip()}\n{end}"
    if begin in document and end in document:
        head, _, rest = document.partition(begin)
        _, _, tail = rest.partition(end)
        return head + block + tail
    return document.rstrip() + "\n\n" + block + "\n"
