"""Dynamic sampling (DAPO / GiGPO filter): which groups are kept, what is drawn, the budget."""

from __future__ import annotations

import itertools

import pytest

from agentrl.training.dynamic_sampling import is_informative, sample_informative


def stream(pattern):
    """draw(k) hands out groups from ``pattern`` (True: informative) with running ids."""
    it = itertools.cycle(pattern)
    ids = itertools.count()
    calls = []

    def draw(k):
        calls.append(k)
        return [(next(ids), next(it)) for _ in range(k)]

    return draw, calls


def returns(g):
    return [0.0, 1.0] if g[1] else [1.0, 1.0]


def test_is_informative():
    assert is_informative([0, 1]) and not is_informative([3, 3, 3]) and not is_informative([5])
    assert not is_informative([1.0, 1.0 + 1e-12])


def test_all_informative_draws_once():
    draw, calls = stream([True])
    r = sample_informative(draw, returns, 4, group_size=2, max_extra_rollouts=100)
    assert calls == [4] and [g[0] for g in r.groups] == [0, 1, 2, 3]
    assert r.metrics["dynamic_sampling/dropped_groups"] == 0
    assert r.metrics["dynamic_sampling/extra_rollouts"] == 0


def test_refills_from_the_keep_rate():
    # half informative: first round keeps 2 of 4; rate 0.5 -> draws ceil(2 / 0.5) = 4 more
    draw, calls = stream([True, False])
    r = sample_informative(draw, returns, 4, group_size=2, max_extra_rollouts=100)
    assert calls == [4, 4]
    assert [g[0] for g in r.groups] == [0, 2, 4, 6] and all(g[1] for g in r.groups)
    m = r.metrics
    assert m["dynamic_sampling/dropped_groups"] == 4 and m["dynamic_sampling/extra_groups"] == 4
    assert m["dynamic_sampling/extra_rollouts"] == 8 and m["dynamic_sampling/short"] == 0


def test_budget_caps_the_extra_rollouts_and_pads():
    # nothing informative: one extra round of at most 6 // 2 = 3 groups, then pad with dropped ones
    draw, calls = stream([False])
    r = sample_informative(draw, returns, 4, group_size=2, max_extra_rollouts=6)
    assert calls == [4, 3] and len(r.groups) == 4
    assert r.metrics["dynamic_sampling/short"] == 4
    assert r.metrics["dynamic_sampling/extra_rollouts"] == 6
    keep = sample_informative(
        stream([False])[0], returns, 4, group_size=2, max_extra_rollouts=0, when_short="keep"
    )
    assert keep.groups == [] and keep.metrics["dynamic_sampling/rounds"] == 1


def test_bad_arguments():
    draw, _ = stream([True])
    with pytest.raises(ValueError, match="when_short"):
        sample_informative(draw, returns, 1, group_size=1, max_extra_rollouts=0, when_short="x")
    with pytest.raises(ValueError, match="max_extra_rollouts"):
        sample_informative(draw, returns, 1, group_size=1, max_extra_rollouts=-1)


# -- in the training recipe (rollout.dynamic_sampling) ---------------------------------------------


def _group_returns(cfg, group):
    return [ep.total_reward + cfg.env.invalid_penalty * ep.invalid_actions for ep in group]


def test_play_iteration_keeps_informative_groups_and_counts_the_draws():
    from agentrl.config import load_config
    from agentrl.recipe import build
    from agentrl.rollout import RolloutStats
    from agentrl.training.iteration import play_iteration

    from .helpers import SMOKE, make_cfg

    cfg = load_config(make_cfg(*SMOKE, "rollout.tasks_per_iter=4", "env.max_steps=4"))
    parts = build(cfg)
    try:
        plain, none = play_iteration(cfg, 0, parts.train_ids, parts.runner, RolloutStats())
        cfg.rollout.dynamic_sampling, cfg.rollout.max_extra_rollouts = True, 16
        eps, m = play_iteration(cfg, 0, parts.train_ids, parts.runner, RolloutStats())
    finally:
        parts.runner.close()
    assert none == {}
    G, n = cfg.rollout.group_size, cfg.rollout.tasks_per_iter
    groups = [eps[i : i + G] for i in range(0, len(eps), G)]
    assert len(groups) == n and all(len({ep.group for ep in g}) == 1 for g in groups)
    assert len({ep.traj for ep in eps}) == len(eps)  # trajectory ids stay unique across draws
    informative = [is_informative(_group_returns(cfg, g)) for g in groups]
    assert sum(informative) == n - m["rollout/dynamic_sampling/short"]
    assert m["rollout/dynamic_sampling/extra_rollouts"] <= 16
    drawn = m["rollout/dynamic_sampling/drawn_rollouts"]
    assert drawn == n * G + m["rollout/dynamic_sampling/extra_rollouts"]
    # The first draw is the iteration's usual rollout: its informative groups are all kept.
    first = [plain[i : i + G] for i in range(0, len(plain), G)]
    kept_first = [g for g in first if is_informative(_group_returns(cfg, g))]
    dropped = m["rollout/dynamic_sampling/dropped_groups"]
    assert len(first) - len(kept_first) <= dropped
    for g in kept_first:
        assert any(
            [ep.total_reward for ep in h] == [ep.total_reward for ep in g]
            and h[0].group == g[0].group
            for h in groups
        )


def test_smoke_run_with_dynamic_sampling(tmp_path):
    import json

    from agentrl.config import load_config
    from agentrl.recipe import train

    from .helpers import SMOKE, make_cfg

    overrides = ["rollout.dynamic_sampling=true", "rollout.max_extra_rollouts=8"]
    cfg = load_config(make_cfg(*SMOKE, *overrides, "trainer.eval_initial=false"))
    train(cfg, tmp_path)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if r["phase"] == "train"]
    assert len(train_rows) == 2
    for r in train_rows:
        for k in ("dropped_groups", "extra_rollouts", "drawn_rollouts", "rounds", "short"):
            assert f"rollout/dynamic_sampling/{k}" in r
        assert r["rollout/dynamic_sampling/extra_rollouts"] <= 8
