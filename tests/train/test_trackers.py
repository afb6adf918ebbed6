"""Experiment trackers end to end: one smoke run logs to TensorBoard, W&B (offline) and MLflow (a
local file store) at once, and each holds the config, every metrics row, the per-category
evaluation tables, the figure and the final model's path. No network is used."""

from __future__ import annotations

import json

import pytest

from agentrl import config as config_module
from agentrl.config import load_config
from agentrl.recipe import train
from agentrl.training.trackers import category_table

from .helpers import SMOKE, make_cfg


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tracked")
    cfg = make_cfg(*SMOKE, "trainer.loggers=[tensorboard,wandb,mlflow]", "trainer.plot=true")
    summary = train(load_config(cfg), out)
    return out, summary


def test_mlflow_holds_config_metrics_tables_figure_and_model(run):
    from mlflow.tracking import MlflowClient

    out, summary = run
    client = MlflowClient((out / "mlruns").resolve().as_uri())
    (mlrun,) = client.search_runs([client.get_experiment_by_name("agentrl").experiment_id])
    assert mlrun.data.params["trainer.iterations"] == "2"
    assert mlrun.data.tags["final_model"] == summary.final_model
    history = client.get_metric_history(mlrun.info.run_id, "train/success_rate")
    assert [m.step for m in history] == [1, 2]
    artifacts = {a.path for a in client.list_artifacts(mlrun.info.run_id, "eval")}
    assert {"eval/eval_initial.json", "eval/eval_final.json"} <= artifacts
    figures = {a.path for a in client.list_artifacts(mlrun.info.run_id, "figures")}
    assert figures == {"figures/training_curve.png"}


def test_traces_reach_mlflow_and_wandb(run):
    """The trace files as MLflow artifacts; a W&B table per file, one row per traced step."""
    from mlflow.tracking import MlflowClient

    from agentrl.evaluation.traces import read_trace, trace_files

    out, _ = run
    files = trace_files(out)
    names = {p.name for p in files}
    assert names == {"eval_initial.jsonl", "eval_final.jsonl", "train_000001.jsonl",
                     "train_000002.jsonl"}  # fmt: skip
    client = MlflowClient((out / "mlruns").resolve().as_uri())
    (mlrun,) = client.search_runs([client.get_experiment_by_name("agentrl").experiment_id])
    got = {a.path for a in client.list_artifacts(mlrun.info.run_id, "traces")}
    assert got == {f"traces/{n}" for n in names}
    (wrun,) = (out / "wandb").glob("offline-run-*")
    for path in files:
        (table,) = (wrun / "files" / "media" / "table" / "traces").glob(f"{path.stem}_*.table.json")
        data = json.loads(table.read_text())
        _, episodes = read_trace(path)
        assert len(data["data"]) == sum(len(e["steps"]) for e in episodes) > 0
        assert data["columns"][:3] == ["phase", "iteration", "task_id"]


def test_wandb_wrote_an_offline_run(run):
    out, _ = run
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].glob("*.wandb")), "the offline run holds its data file"


def test_tensorboard_events_are_written(run):
    out, _ = run
    assert list((out / "tb").glob("events.out.tfevents.*"))


def test_category_table_reads_an_evaluation_row():
    row = {
        "phase": "eval",
        "eval/success_rate": 0.5,
        "eval/Sokoban-v0/5x5-1box/success_rate": 0.25,
        "eval/Sokoban-v0/5x5-1box/episodes": 4.0,
        "train/loss": 1.0,
    }
    columns, rows = category_table(row)
    assert columns[:4] == ["env", "category", "episodes", "success_rate"]
    assert rows == [
        ["Sokoban-v0", "5x5-1box", 4.0, 0.25, None, None, None, None],
        ["all", "all", None, 0.5, None, None, None, None],
    ]


def test_a_missing_tracker_names_the_extra(monkeypatch):
    monkeypatch.setitem(config_module.LOGGER_EXTRAS, "wandb", ("no_such_module_xyz", "wandb"))
    with pytest.raises(config_module.ConfigError, match=r"pip install 'agentrl\[wandb\]'"):
        load_config(make_cfg(*SMOKE, "trainer.loggers=[wandb]"))
    with pytest.raises(config_module.ConfigError, match="unknown logger"):
        load_config(make_cfg(*SMOKE, "trainer.loggers=[neptune]"))


def test_metrics_rows_are_plain_json(run):
    out, _ = run
    for line in (out / "metrics.jsonl").read_text().splitlines():
        json.loads(line)


def test_summary_and_model_card_show_initial_and_final_per_category(run):
    out, summary = run
    table_head = "| env | category | initial | final | change (points) |"
    assert table_head in (out / "summary.md").read_text()
    card = (out / "checkpoints" / "final" / "README.md").read_text()
    assert table_head in card and "## Load it" in card
    assert f'AutoModelForCausalLM.from_pretrained("{summary.final_model}")' in card
    assert "python -m agentrl.evaluate agent=model agent.path=" in card


def test_category_series_has_one_line_per_category_only_when_there_are_several():
    from agentrl.training.summary import _category_series

    one = [{"eval/E/a/success_rate": 0.1, "eval/E/all/success_rate": 0.1}]
    assert _category_series(one) == {}
    two = [
        {"eval/E/a/success_rate": 0.1, "eval/E/b/success_rate": 0.3},
        {"eval/E/a/success_rate": 0.2, "eval/E/b/success_rate": 0.4},
    ]
    assert _category_series(two) == {("", "a"): [0.1, 0.2], ("", "b"): [0.3, 0.4]}
