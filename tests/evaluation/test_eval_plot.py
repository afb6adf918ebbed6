"""python -m agentrl.plot: curves per category from metrics.jsonl, and its error handling."""

from __future__ import annotations

import json

import pytest

from agentrl.evaluation import EpisodeRecord, summarize
from agentrl.evaluation.charts import curve_series, plot_curves
from agentrl.plot import load_metrics, main


def write_run(path, wins_per_step, extra_rows=True):
    """metrics.jsonl with an evaluation row (10 episodes per category) every 5 steps."""
    path.mkdir(parents=True)
    rows = []
    for step, wins in wins_per_step.items():
        recs = [
            EpisodeRecord("E", str(i), cat, i < w, 0.0, 1)
            for cat, w in wins.items()
            for i in range(10)
        ]
        if extra_rows:
            rows.append({"step": step, "loss": 0.5})
        rows.append({"step": step, **summarize(recs).metrics("eval")})
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


RUN_A = {0: {"x": 1, "y": 0}, 5: {"x": 4, "y": 2}, 10: {"x": 8, "y": 5}}
RUN_B = {0: {"x": 0, "y": 0}, 5: {"x": 6, "y": 6}}


def test_series_carry_the_metrics(tmp_path):
    rows = write_run(tmp_path / "a", RUN_A)
    s = curve_series(rows)
    assert set(s) == {("E", "x"), ("E", "y"), ("E", "all"), ("all", "all")}
    assert s[("E", "x")]["x"] == [0.0, 5.0, 10.0]
    assert s[("E", "x")]["y"] == [0.1, 0.4, 0.8]
    assert s[("E", "all")]["y"] == [0.05, 0.3, 0.65]
    assert all(
        lo <= y <= hi
        for lo, y, hi in zip(s[("E", "y")]["low"], s[("E", "y")]["y"], s[("E", "y")]["high"])
    )
    assert curve_series(rows, metric="mean_steps")[("E", "x")]["low"] == []


def test_figure_draws_every_run_per_category(tmp_path):
    runs = {"a": write_run(tmp_path / "a", RUN_A), "b": write_run(tmp_path / "b", RUN_B)}
    fig = plot_curves(runs, tmp_path / "c.png")
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["x", "y", "all"]
    lines = axes[0].get_lines()
    assert [ln.get_label() for ln in lines] == ["a", "b"]
    assert list(lines[0].get_ydata()) == pytest.approx([10.0, 40.0, 80.0])
    assert list(lines[1].get_xdata()) == [0.0, 5.0]


def test_cli_writes_png(tmp_path, capsys):
    write_run(tmp_path / "grpo", RUN_A)
    write_run(tmp_path / "gigpo", RUN_B)
    with (tmp_path / "gigpo" / "metrics.jsonl").open("a") as f:
        f.write('{"step": 11, "eval/E/x/succ')  # a run killed mid-write
    out = tmp_path / "curves.png"
    assert main([str(tmp_path / "grpo"), str(tmp_path / "gigpo"), "-o", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert "metrics.jsonl:5: not valid JSON" in capsys.readouterr().err
    assert (
        main([str(tmp_path / "grpo"), "--metric", "mean_steps", "--x", "step", "-o", str(out)]) == 0
    )


def test_cli_errors(tmp_path, capsys):
    assert main([str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "metrics.jsonl").write_text('{"step": 1, "loss": 2}\n')
    assert main([str(tmp_path / "r"), "-o", str(tmp_path / "x.png")]) == 2
    assert "no x column" in capsys.readouterr().err
    assert main([str(tmp_path / "r"), "--x", "step", "-o", str(tmp_path / "x.png")]) == 2
    assert "no 'eval/…/success_rate' values" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(tmp_path / "r"), "--labels", "a", "b"])


def test_load_metrics_accepts_a_file(tmp_path):
    rows = write_run(tmp_path / "a", RUN_B, extra_rows=False)
    assert load_metrics(tmp_path / "a" / "metrics.jsonl") == rows
