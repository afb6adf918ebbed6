"""summarize/Report: hand-computed aggregates, JSON round trip, table/JSON/chart agreement."""

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.evaluation import ALL, EpisodeRecord, Report, metric_key, parse_metric_key, summarize
from agentrl.evaluation.charts import plot_bars
from agentrl.evaluation.stats import mean_interval, wilson_interval


def rec(env, cat, won, score, steps, invalid=0, truncated=False, reward=0.0, task="t", error=None):
    return EpisodeRecord(
        env, task, cat, won, score, steps, invalid, truncated, reward, seed=1, error=error
    )


RECORDS = [
    rec("A", "x", True, 1.0, 4, 0, False, 9.6),
    rec("A", "x", False, 0.5, 10, 2, True, -1.0),
    rec("A", "y", True, 1.0, 2, 1, False, 9.8),
    rec("B", "z", False, 0.0, 6, 6, True, 0.0, error="RuntimeError: boom"),
]


def test_hand_computed_groups():
    r = summarize(RECORDS, meta={"agent": "test"})
    assert [(g.env, g.category) for g in r.groups] == [
        ("A", "x"),
        ("A", "y"),
        ("A", ALL),
        ("B", "z"),
        ("B", ALL),
    ]
    ax = r.get("A", "x")
    assert (ax.episodes, ax.successes, ax.success_rate) == (2, 1, 0.5)
    assert ax.mean_score == pytest.approx(0.75)
    assert ax.mean_steps == 7.0
    assert ax.mean_return == pytest.approx(4.3)
    assert (ax.steps, ax.invalid_actions, ax.invalid_action_rate) == (14, 2, pytest.approx(2 / 14))
    assert (ax.truncations, ax.errors) == (1, 0)
    a = r.get("A")
    assert (a.episodes, a.successes) == (3, 2)
    assert a.invalid_action_rate == pytest.approx(3 / 16)  # step-weighted, not mean of rates
    assert a.mean_score == pytest.approx(2.5 / 3)
    o = r.overall
    assert (o.env, o.category, o.episodes, o.successes, o.truncations, o.errors) == (
        ALL,
        ALL,
        4,
        2,
        2,
        1,
    )
    assert o.invalid_action_rate == pytest.approx(9 / 22)
    # 2 of 4: centre 0.5, half = z / 1.960365 * sqrt(0.0625 + 0.060023) = 0.349961
    assert (o.success_ci_low, o.success_ci_high) == pytest.approx((0.150039, 0.849961), abs=1e-6)


def test_rows_add_overall_only_for_several_envs():
    assert summarize(RECORDS).rows()[-1].env == ALL
    one = summarize(RECORDS[:3])
    assert [g.category for g in one.rows()] == ["x", "y", ALL]
    assert one.overall.episodes == 3


def test_natural_category_order_and_override():
    recs = [rec("S", c, False, 0.0, 1) for c in ["10x10-2box", "6x6-1box", "7x7-1box"]]
    assert summarize(recs).categories("S") == ["6x6-1box", "7x7-1box", "10x10-2box"]
    order = summarize(recs, category_order={"S": ["7x7-1box"]}).categories("S")
    assert order == ["7x7-1box", "6x6-1box", "10x10-2box"]


def test_empty_and_bad_records():
    with pytest.raises(ValueError, match="zero episodes"):
        summarize([])
    with pytest.raises(ValueError, match="score"):
        rec("A", "x", True, 1.5, 1)
    with pytest.raises(ValueError, match="invalid_actions"):
        rec("A", "x", True, 1.0, 1, invalid=2)
    with pytest.raises(TypeError, match="won"):
        EpisodeRecord("A", "t", "x", 1, 1.0, 1)
    with pytest.raises(ValueError, match="unknown EpisodeRecord keys"):
        EpisodeRecord.from_dict({**RECORDS[0].to_dict(), "sucess": True})


def test_json_round_trip(tmp_path):
    r = summarize(RECORDS, meta={"agent": "test", "tasks": ["t"]})
    path = tmp_path / "sub" / "results.json"
    text = r.to_json(path)
    assert path.read_text() == text
    back = Report.from_json(path)
    assert back == r
    assert back.to_json() == text
    data = json.loads(text)
    assert data["episodes"][0]["task_id"] == "t" and data["episodes"][0]["seed"] == 1


def test_corrupted_json_is_reported(tmp_path):
    r = summarize(RECORDS)
    data = r.to_dict()
    data["groups"][0]["success_rate"] = 0.99
    with pytest.raises(ValueError, match="do not match"):
        Report.from_dict(data)
    with pytest.raises(ValueError, match="format"):
        Report.from_dict({"episodes": []})
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        Report.from_json(bad)


def test_metrics_keys_round_trip():
    r = summarize([rec("agentrl/Sok oban", "6x6/1", True, 1.0, 3)] + RECORDS)
    m = r.metrics("eval")
    assert m["eval/success_rate"] == 3 / 5
    assert m["eval/agentrl_Sok_oban/6x6_1/success_rate"] == 1.0
    assert m["eval/A/all/episodes"] == 3.0
    for key in m:
        env, cat, stat = parse_metric_key(key, "eval")
        assert metric_key("eval", None if env == ALL and cat == ALL else env, cat, stat) == key
    assert parse_metric_key("train/loss") is None
    assert parse_metric_key("eval/A/x/not_a_stat") is None


def _table_rows(text):
    lines = text.strip().splitlines()[2:]
    return [re.split(r"\s{2,}", line.strip()) for line in lines]


def test_table_json_and_chart_agree(tmp_path):
    r = summarize(RECORDS, meta={"agent": "test"})
    data = json.loads(r.to_json())
    groups = data["groups"] + [data["overall"]]
    rows = _table_rows(r.table("plain"))
    assert len(rows) == len(groups)
    for row, g in zip(rows, groups):
        assert row[:3] == [g["env"], g["category"], str(g["episodes"])]
        assert float(row[3]) == round(100 * g["success_rate"], 1)
        lo, hi = (float(v) for v in row[4].split("–"))
        assert (lo, hi) == (
            round(100 * g["success_ci_low"], 1),
            round(100 * g["success_ci_high"], 1),
        )
        assert float(row[5]) == round(100 * g["mean_score"], 1)
        lo, hi = (float(v) for v in row[6].split("–"))  # graded scores here: their interval shows
        assert (lo, hi) == (round(100 * g["score_ci_low"], 1), round(100 * g["score_ci_high"], 1))
        assert float(row[7]) == round(g["mean_steps"], 1)
        assert float(row[8]) == round(100 * g["invalid_action_rate"], 1)
        assert int(row[9]) == g["truncations"] and int(row[10]) == g["errors"]
    md = r.table("markdown").splitlines()
    assert md[0].startswith("| env | category | episodes | success % | 95% CI |")
    assert len(md) == 2 + len(groups)

    fig = plot_bars([r], tmp_path / "chart.png")
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for ax, env in zip(fig.axes, ["A", "B"]):
        from matplotlib.container import BarContainer

        (bars,) = [c for c in ax.containers if isinstance(c, BarContainer)]
        cats = r.categories(env) + [ALL]
        heights = [p.get_height() for p in bars.patches]
        assert heights == pytest.approx([100 * r.get(env, c).success_rate for c in cats])
        # error-bar ends: the vertical segments of the bar container's error bars
        segs = bars.errorbar.lines[2][0].get_segments()
        ends = [v for s in segs for v in (s[0][1], s[1][1])]
        want = [
            v
            for c in cats
            for v in (100 * r.get(env, c).success_ci_low, 100 * r.get(env, c).success_ci_high)
        ]
        assert ends == pytest.approx(want)
        texts = [t.get_text() for t in ax.texts]
        assert texts == [f"{100 * r.get(env, c).success_rate:.1f}" for c in cats]


def test_same_data_same_png(tmp_path):
    r = summarize(RECORDS)
    r.plot(tmp_path / "a.png")
    r.plot(tmp_path / "b.png")
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()


def test_rich_table_and_print(capsys):
    from rich.console import Console

    r = summarize(RECORDS)
    console = Console(width=200, record=True)
    r.print(console)
    out = console.export_text()
    assert "RuntimeError" not in out and "B" in out and "50.0" in out
    assert r.table("rich").row_count == len(r.rows())
    with pytest.raises(ValueError, match="table kind"):
        r.table("html")


records = st.builds(
    lambda env, cat, won, score, steps, inv: rec(env, cat, won, score, steps, min(inv, steps)),
    st.sampled_from(["A", "B"]),
    st.sampled_from(["x", "y", "z"]),
    st.booleans(),
    st.floats(0, 1),
    st.integers(0, 50),
    st.integers(0, 50),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(records, min_size=1, max_size=40))
def test_groups_partition_the_records(recs):
    r = summarize(recs)
    for env in r.envs:
        parts = [r.get(env, c) for c in r.categories(env)]
        total = r.get(env)
        assert sum(g.episodes for g in parts) == total.episodes
        assert sum(g.successes for g in parts) == total.successes
        assert sum(g.invalid_actions for g in parts) == total.invalid_actions
        for g in parts + [total]:
            assert g.success_ci_low <= g.success_rate <= g.success_ci_high
            assert 0 <= g.invalid_action_rate <= 1
    assert r.overall.episodes == len(recs)
    assert Report.from_dict(json.loads(r.to_json())) == r


@pytest.mark.parametrize(
    "label", ["pick_clean_then_place_in_recep", "look_at_obj_in_light", "6x6-1box", "a_b"]
)
def test_long_tick_labels_wrap_without_losing_text(label):
    from agentrl.evaluation.charts import _wrap

    wrapped = _wrap(label)
    assert wrapped.replace("\n", "") == label
    assert all(len(line) <= 15 for line in wrapped.splitlines()) or "\n" not in wrapped


def test_stacked_chart_layout_draws_the_same_bars(tmp_path):
    from matplotlib.container import BarContainer

    r = summarize(RECORDS)
    fig = plot_bars([r], tmp_path / "s.png", max_width=1.0)  # too narrow: one env per row
    axes = fig.axes
    assert len(axes) == 2 and axes[0].get_position().x0 == pytest.approx(axes[1].get_position().x0)
    for ax, env in zip(axes, ["A", "B"]):
        (bars,) = [c for c in ax.containers if isinstance(c, BarContainer)]
        cats = r.categories(env) + [ALL]
        assert [p.get_height() for p in bars.patches] == pytest.approx(
            [100 * r.get(env, c).success_rate for c in cats]
        )


def test_evaluation_modules_import_each_other_without_cycles():
    # Every import counts, at module level, in functions and under TYPE_CHECKING alike: views
    # (render, charts) read a report through groups.ReportView and never import report.py.
    import ast
    from pathlib import Path

    import agentrl.evaluation as pkg

    root = Path(pkg.__file__).parent
    graph = {}
    for path in root.glob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                deps |= {node.module} if node.module else {a.name for a in node.names}
        graph[path.stem] = {d.split(".")[0] for d in deps} - {"__init__"}
    assert "report" not in graph["render"] and "report" not in graph["charts"]

    def reaches(start, goal, seen=()):
        return any(
            d == goal or (d not in seen and reaches(d, goal, (*seen, d)))
            for d in graph.get(start, ())
        )

    cycles = sorted(m for m in graph if m != "__init__" and reaches(m, m))
    assert cycles == []


def test_score_interval_is_wilson_at_the_mean_and_shows_only_for_graded_scores():
    assert mean_interval(0.5, 4) == pytest.approx(wilson_interval(2, 4))  # 0/1 scores: Wilson
    low, high = mean_interval(0.55, 10)  # hand: z=1.96, z2n=0.38415, centre=0.5361, half=0.2625
    assert (low, high) == pytest.approx((0.2737, 0.7986), abs=1e-4)
    assert mean_interval(1.0, 5)[1] == 1.0 and mean_interval(0.0, 5)[0] == 0.0
    with pytest.raises(ValueError, match="0 <= mean <= 1"):
        mean_interval(1.5, 3)
    binary = summarize([rec("A", "x", True, 1.0, 2), rec("A", "x", False, 0.0, 2)])
    assert "score CI" not in binary.table("plain")  # score equals success: no second interval
    graded = summarize([rec("A", "x", True, 1.0, 2), rec("A", "x", False, 0.5, 2)])
    assert "score CI" in graded.table("markdown")
    g = graded.get("A", "x")
    assert (g.score_ci_low, g.score_ci_high) == mean_interval(0.75, 2)


def test_a_report_written_before_the_score_interval_still_loads():
    data = summarize(RECORDS).to_dict()
    for g in data["groups"]:
        del g["score_ci_low"], g["score_ci_high"]
    assert Report.from_dict(data).overall == summarize(RECORDS).overall
