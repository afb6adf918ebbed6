"""python -m agentrl.evaluation.compare: results of several runs in one chart and table."""

from __future__ import annotations

import pytest

from agentrl.evaluation import EpisodeRecord, summarize
from agentrl.evaluation.compare import combine, comparison_table, main


def rep(agent, env, wins, cats=("a", "b")):
    recs = [
        EpisodeRecord(env, str(i), cats[i % len(cats)], i < wins, 1.0 if i < wins else 0.25, 3)
        for i in range(8)
    ]
    return summarize(recs, meta={"agent": agent, "env": env})


def test_combine_merges_envs_per_agent():
    out = combine(
        [rep("random", "S", 2), rep("random", "W", 1), rep("expert", "S", 8), rep("expert", "W", 8)]
    )
    assert list(out) == ["random", "expert"]
    assert out["random"].envs == ["S", "W"] and out["random"].overall.episodes == 16
    assert out["random"].overall.successes == 3 and out["expert"].overall.success_rate == 1.0
    relabelled = combine([rep("x", "S", 2), rep("x", "S", 4)], labels=["run1", "run2"])
    assert list(relabelled) == ["run1", "run2"]
    with pytest.raises(ValueError, match="labels"):
        combine([rep("x", "S", 2)], labels=["a", "b"])


def test_table_cells_come_from_the_reports():
    reports = combine([rep("random", "S", 2), rep("expert", "S", 8)])
    lines = comparison_table(reports).splitlines()
    assert lines[0] == (
        "| env | category | episodes | random success % (95% CI) | expert success % (95% CI) "
        "| random score | expert score |"
    )
    a_rand, a_exp = reports["random"].get("S", "a"), reports["expert"].get("S", "a")
    row = lines[2].split(" | ")
    assert row[0] == "| S" and row[1] == "a" and row[2] == "4"
    assert (
        row[3]
        == f"{100 * a_rand.success_rate:.1f} [{100 * a_rand.success_ci_low:.1f}, {100 * a_rand.success_ci_high:.1f}]"
    )
    assert row[4].startswith("100.0 [")
    assert (
        row[5] == f"{100 * a_rand.mean_score:.1f}"
        and row[6].rstrip(" |") == f"{100 * a_exp.mean_score:.1f}"
    )
    assert [ln.split(" | ")[1] for ln in lines[2:]] == ["a", "b", "all"]


def test_cli(tmp_path, capsys):
    paths = []
    for agent, wins in (("random", 1), ("expert", 8)):
        p = tmp_path / f"{agent}.json"
        rep(agent, "S", wins).to_json(p)
        paths.append(str(p))
    assert main([*paths, "-o", str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "c.md").read_text() in capsys.readouterr().out
    (tmp_path / "bad.json").write_text("{")
    assert main([str(tmp_path / "bad.json"), "-o", str(tmp_path / "d.png")]) == 2
    assert "not valid JSON" in capsys.readouterr().err
