"""Experiment trackers: TensorBoard, Weights & Biases and MLflow behind one small interface.

``trainer.loggers`` names them (default ``[tensorboard]``). Every tracker gets the same things:
the resolved config once, every metrics row (its finite numbers, at ``step = iteration``), a
per-category table for every evaluation row, and at the end the figures, the summary's scalars
and the final model folder's path. W&B and MLflow also get the trajectory traces
(``trainer.traces``): W&B a table per trace file, one row per step; MLflow the files as
artifacts under ``traces/``. W&B runs offline unless ``trainer.wandb.mode`` says otherwise
(``wandb sync`` uploads later); MLflow writes to a local file store under the run folder unless
``trainer.mlflow.tracking_uri`` points elsewhere. Each is an optional extra; a missing one is a
config error naming the extra (checked before any work by ``TrainerConfig``).
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..evaluation import parse_metric_key
from ..evaluation.traces import read_trace

__all__ = ["LOGGERS", "Tracker", "category_table", "make_trackers", "numbers", "trace_table"]

#: ``trainer.loggers`` values and the module each needs.
LOGGERS = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}
_STATS = (
    "episodes",
    "success_rate",
    "success_ci_low",
    "success_ci_high",
    "mean_score",
    "mean_steps",
)


class Tracker(Protocol):
    def log_row(self, row: Mapping[str, Any]) -> None: ...

    def finish(
        self, figures: Sequence[Path], scalars: Mapping[str, Any], final_model: Path | None
    ) -> None: ...

    def close(self) -> None: ...


def numbers(row: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a metrics row (booleans and strings left out)."""
    return {
        k: float(v)
        for k, v in row.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


def category_table(row: Mapping[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """``(columns, rows)``: one row per env and category of an evaluation row's metrics."""
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for key, value in row.items():
        parsed = parse_metric_key(key)
        if parsed is None:
            continue
        env, category, stat = parsed
        if stat in _STATS:
            cells.setdefault((env, category), {})[stat] = value
    columns = ["env", "category", *_STATS]
    rows = [
        [env, cat, *(stats.get(s) for s in _STATS)] for (env, cat), stats in sorted(cells.items())
    ]
    return columns, rows


def _is_eval(row: Mapping[str, Any]) -> bool:
    return str(row.get("phase", "")).startswith("eval")


class TensorBoardTracker:
    """Scalars under ``<run>/tb``; evaluation tables and the final model path as text."""

    def __init__(self, out: Path, config: Mapping[str, Any]):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(out / "tb"))

    def log_row(self, row: Mapping[str, Any]) -> None:
        step = int(row.get("iteration", 0))
        for k, v in numbers(row).items():
            self.writer.add_scalar(k, v, step)
        if _is_eval(row):
            columns, rows = category_table(row)
            lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            lines += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
            self.writer.add_text(f"eval/{row['phase']}", "\n".join(lines), step)

    def finish(self, figures, scalars, final_model) -> None:
        if final_model is not None:
            self.writer.add_text("final_model", str(final_model))

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    """A W&B run (``trainer.wandb``: project, entity, name, mode; offline by default)."""

    def __init__(self, out: Path, config: Mapping[str, Any], settings: Mapping[str, Any]):
        import wandb

        self.wandb = wandb
        mode = settings.get("mode") or "offline"
        self.run = wandb.init(
            project=settings.get("project") or "agentrl",
            entity=settings.get("entity"),
            name=settings.get("name") or out.name,
            mode=mode,
            dir=str(out),
            config=dict(config),
            settings=wandb.Settings(silent=True, console="off"),
            reinit="create_new",
        )

    def log_row(self, row: Mapping[str, Any]) -> None:
        data: dict[str, Any] = numbers(row)
        if _is_eval(row):
            columns, rows = category_table(row)
            data[f"tables/{row['phase']}"] = self.wandb.Table(columns=columns, data=rows)
        self.run.log(data, step=int(row.get("iteration", 0)))

    def finish(self, figures, scalars, final_model) -> None:
        for fig in figures:
            self.run.log({f"figures/{fig.stem}": self.wandb.Image(str(fig))})
        self.run.summary.update({k: v for k, v in scalars.items() if _plain(v)})
        if final_model is not None:
            self.run.summary["final_model"] = str(final_model)

    def log_traces(self, path: Path, step: int) -> None:
        """A trace file as a W&B table, one row per step (``traces/<file>``)."""
        columns, rows = trace_table(path)
        self.run.log({f"traces/{_stem(path)}": self.wandb.Table(columns=columns, data=rows)},
                     step=step)  # fmt: skip

    def close(self) -> None:
        self.run.finish()


class MLflowTracker:
    """An MLflow run (``trainer.mlflow``: tracking_uri, experiment; a file store under the run
    folder by default, which MLflow 3 keeps in maintenance mode: opted into here)."""

    def __init__(self, out: Path, config: Mapping[str, Any], settings: Mapping[str, Any]):
        uri = settings.get("tracking_uri") or (out / "mlruns").resolve().as_uri()
        if uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        import mlflow

        self.mlflow = mlflow
        self.client = mlflow.tracking.MlflowClient(uri)
        name = settings.get("experiment") or "agentrl"
        exp = self.client.get_experiment_by_name(name)
        exp_id = exp.experiment_id if exp else self.client.create_experiment(name)
        self.run_id = self.client.create_run(exp_id, run_name=out.name).info.run_id
        params = _flatten(config)
        for k, v in params.items():
            self.client.log_param(self.run_id, _key(k), str(v)[:500])

    def log_row(self, row: Mapping[str, Any]) -> None:
        step = int(row.get("iteration", 0))
        metrics = [
            self.mlflow.entities.Metric(_key(k), v, _now_ms(), step)
            for k, v in numbers(row).items()
        ]
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)
        if _is_eval(row):
            columns, rows = category_table(row)
            table = {"columns": columns, "rows": rows}
            self.client.log_dict(self.run_id, table, f"eval/{row['phase']}.json")

    def finish(self, figures, scalars, final_model) -> None:
        for fig in figures:
            self.client.log_artifact(self.run_id, str(fig), "figures")
        if final_model is not None:
            self.client.set_tag(self.run_id, "final_model", str(final_model))

    def log_traces(self, path: Path, step: int) -> None:
        """A trace file as an artifact under ``traces/``."""
        self.client.log_artifact(self.run_id, str(path), "traces")

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def make_trackers(
    names: Sequence[str],
    out: Path,
    config: Mapping[str, Any],
    settings: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Tracker]:
    """The trackers ``names`` asks for, writing under ``out``; ``config`` is the resolved run
    config, ``settings`` the per-tracker sections (``{"wandb": {...}, "mlflow": {...}}``)."""
    settings = settings or {}
    made: list[Tracker] = []
    for name in names:
        if name == "tensorboard":
            made.append(TensorBoardTracker(out, config))
        elif name == "wandb":
            made.append(WandbTracker(out, config, settings.get("wandb") or {}))
        elif name == "mlflow":
            made.append(MLflowTracker(out, config, settings.get("mlflow") or {}))
        else:
            raise ValueError(f"unknown logger {name!r}; choose from {', '.join(LOGGERS)}")
    return made


def close_all(trackers: Sequence[Tracker]) -> None:
    """Close every tracker; one that fails warns and does not stop the others."""
    for tr in trackers:
        try:
            tr.close()
        except Exception as exc:  # noqa: BLE001 - a tracker must not lose a finished run
            print(f"warning: closing {type(tr).__name__} failed: {exc}", file=sys.stderr)


#: The columns of a trace table (one row per step; :func:`trace_table`).
TRACE_COLUMNS = ["phase", "iteration", "task_id", "category", "group", "traj", "agent", "t",
                 "observation", "response", "action", "valid", "reward", "advantage", "outcome"]  # fmt: skip


def trace_table(path: Path) -> tuple[list[str], list[list[Any]]]:
    """``(columns, rows)`` of a trace file: one row per step, its episode's ids and outcome."""
    meta, episodes = read_trace(path)
    rows = [
        [
            meta.get("phase"),
            meta.get("iteration"),
            ep["task_id"],
            ep["category"],
            ep["group"],
            ep["traj"],
            s.get("agent") or "",
            s["t"],
            s["observation"],
            s["response_text"],
            s["action"] or "",
            s["valid"],
            s["reward"],
            s.get("advantage"),
            ep["outcome"],
        ]  # fmt: skip
        for ep in episodes
        for s in ep["steps"]
    ]
    return list(TRACE_COLUMNS), rows


def _stem(path: Path) -> str:
    return path.name.split(".")[0]


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _key(k: str) -> str:
    """An MLflow-safe name (letters, digits, ``_ - . / space``)."""
    return re.sub(r"[^\w\-./ ]", "_", k)


def _plain(v: Any) -> bool:
    return isinstance(v, str | bool) or (isinstance(v, int | float) and math.isfinite(v))


def _cell(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)
