"""Trajectory traces of a real smoke run: which iterations and groups are traced, and that each
step's credit, groups and per-token loss values are the ones the run used."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from agentrl.config import load_config
from agentrl.evaluation.traces import read_trace, trace_files
from agentrl.recipe import train
from agentrl.training.traces import traced_iteration

from .helpers import SMOKE, make_cfg


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("traced")
    cfg = make_cfg(*SMOKE, "trainer.traces.groups=1", "trainer.traces.eval_episodes=3")
    summary = train(load_config(cfg), out)
    return out, summary


def test_traced_iterations():
    assert [i for i in range(120) if traced_iteration(i, 20, 120)] == [0, 20, 40, 60, 80, 100, 119]
    assert [i for i in range(2) if traced_iteration(i, 20, 2)] == [0, 1]
    assert not any(traced_iteration(i, 0, 5) for i in range(5))


def test_the_files_of_a_run(run):
    out, _ = run
    names = [p.name for p in trace_files(out)]
    assert names == ["eval_final.jsonl", "eval_initial.jsonl", "train_000001.jsonl",
                     "train_000002.jsonl"]  # fmt: skip
    meta, episodes = read_trace(out / "traces" / "train_000001.jsonl")
    assert meta["kind"] == "train" and meta["iteration"] == 1 and meta["credit"] == "gigpo"
    assert len(episodes) == 4  # one group of group_size rollouts
    assert len({e["group"] for e in episodes}) == 1


def test_train_steps_carry_the_credit_and_the_loss_values(run):
    out, _ = run
    _, episodes = read_trace(out / "traces" / "train_000002.jsonl")
    steps = [s for e in episodes for s in e["steps"]]
    assert steps and all(s["prompt_ids"] and s["response_ids"] and s["prompt_text"] for s in steps)
    for s in steps:
        c = s["credit"]
        # GiGPO (omega 1): advantage = episode term + step term
        assert s["advantage"] == pytest.approx(
            c["component_episode"] + c["component_step"], abs=1e-5
        )
        tok = s["tokens"]
        n = len(s["response_ids"])
        assert all(len(tok[k]) == n for k in ("text", "engine_logprob", "advantage", "ratio"))
        for j in range(n):  # the step's advantage on each of its tokens, as the loss used it
            assert tok["advantage"][j] == pytest.approx(s["advantage"], abs=1e-5)
            assert tok["ratio"][j] == pytest.approx(
                math.exp(tok["learner_logprob"][j] - tok["old_logprob"][j]), rel=1e-4, abs=1e-5
            )
            assert tok["old_logprob"][j] == pytest.approx(tok["engine_logprob"][j], abs=1e-5)
        assert "".join(tok["text"]).startswith(s["response_text"])  # (+ the end token)
        assert any(tok["in_loss"]) and tok["version"] == [1] * n  # sampled by version 1's weights
    # anchor groups: steps sharing one hold the same state; the size counts them
    by_anchor: dict[int, list] = {}
    for s in steps:
        by_anchor.setdefault(s["credit"]["anchor_group"], []).append(s)
    for members in by_anchor.values():
        assert len({json.dumps(m["state_key"]) for m in members}) == 1
        assert all(m["credit"]["anchor_size"] == len(members) for m in members)
        mean = np.mean([m["credit"]["step_return"] for m in members])
        assert members[0]["credit"]["anchor_baseline"] == pytest.approx(mean, abs=1e-5)


def test_evaluations_trace_the_first_held_out_tasks(run):
    out, summary = run
    for label in ("initial", "final"):
        meta, episodes = read_trace(out / "traces" / f"eval_{label}.jsonl")
        assert meta["kind"] == "eval" and meta["phase"] == label
        assert len(episodes) == 3
        assert [e["task_id"] for e in episodes] == ["1000000000", "1000000001", "1000000002"]
        for e in episodes:
            assert e["outcome"] in ("won", "lost") and e["category"] == "5x5-1box"
            assert e["won"] == (e["outcome"] == "won")
            assert len(e["steps"]) >= 1 and "advantage" not in e["steps"][0]


@pytest.mark.parametrize(
    ("name", "keys"),
    [
        ("hgpo", {"history_k1_group", "history_k2_group", "step_return", "episode_mean_return"}),
        ("grpo", {"episode_group", "episode_group_size", "episode_return", "episode_baseline"}),
    ],
)
def test_other_modules_trace_their_groups(tmp_path, name, keys):
    cfg = make_cfg(*SMOKE, f"credit={name}", "trainer.iterations=1", "trainer.eval_initial=false",
                   "trainer.traces.eval_episodes=0")  # fmt: skip
    train(load_config(cfg), tmp_path)
    _, episodes = read_trace(tmp_path / "traces" / "train_000001.jsonl")
    for e in episodes:
        for s in e["steps"]:
            assert keys <= set(s["credit"]), s["credit"]
            if name == "grpo":  # the episode baseline: the group's mean return
                same = [x["return"] for x in episodes if x["group"] == e["group"]]
                assert s["credit"]["episode_baseline"] == pytest.approx(np.mean(same), abs=1e-5)
                assert "anchor_group" not in s["credit"]


def test_traces_off_and_gzip(tmp_path):
    cfg = make_cfg(*SMOKE, "trainer.iterations=1", "trainer.traces.every=0",
                   "trainer.traces.eval_episodes=0", "trainer.eval_initial=false")  # fmt: skip
    train(load_config(cfg), tmp_path / "off")
    assert trace_files(tmp_path / "off") == []
    cfg = make_cfg(*SMOKE, "trainer.iterations=1", "trainer.traces.gzip=true",
                   "trainer.eval_initial=false", "trainer.traces.max_chars=100")  # fmt: skip
    train(load_config(cfg), tmp_path / "gz")
    files = trace_files(tmp_path / "gz")
    assert [p.name for p in files] == ["eval_final.jsonl.gz", "train_000001.jsonl.gz"]
    _, episodes = read_trace(files[1])
    assert len(episodes) == 8  # two groups (the default) of 4
    assert all(len(s["prompt_text"]) <= 101 for e in episodes for s in e["steps"])


def test_traces_that_cannot_be_written_warn_and_training_goes_on(tmp_path, capsys):
    (tmp_path / "traces").write_text("a file where the folder would go")
    cfg = make_cfg(*SMOKE, "trainer.iterations=1", "trainer.eval_initial=false")
    summary = train(load_config(cfg), tmp_path)
    assert summary.iterations == 1
    err = capsys.readouterr().err
    assert "warning: traces: train_000001 not written" in err
    assert "warning: traces: eval_final not written" in err
