"""Asynchronous rollouts (``rollout.staleness``): the producer's staleness bound under any timing,
its failures and shutdown, and end-to-end runs against the synchronous loop."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from types import SimpleNamespace

import psutil
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.backends.base import Generation
from agentrl.config import TrainConfig, load_config
from agentrl.episodes import EpisodeResult, StepRecord
from agentrl.recipe import train
from agentrl.training.producer import Producer, ProducerError

from .helpers import SMOKE, make_cfg


# -- the producer alone, with fake-fast engine and learner ----------------------------------------
class _Engine:
    """Answers every prompt at once; the weights it holds are whatever ``load`` put there."""

    def __init__(self, delay: float):
        self.delay, self.weights = delay, None

    def generate(self, prompts, sampling, allowed=None):
        time.sleep(self.delay)
        return [Generation([7], [-0.5], extra={"held": self.weights}) for _ in prompts]

    def update_weights(self, state_dict):
        pass

    def close(self):
        pass


def _cfg(k: int, partial: bool, iterations: int, tasks: int = 2, group: int = 2) -> TrainConfig:
    cfg = TrainConfig()
    cfg.rollout.staleness, cfg.rollout.partial_rollouts = k, partial
    cfg.rollout.tasks_per_iter, cfg.rollout.group_size = tasks, group
    cfg.trainer.iterations = iterations
    return cfg


def _producer(
    cfg, engine, steps: int, fail_at: int | None = None, informative=lambda b, d, g: True
) -> Producer:
    """A producer whose batches are ``steps`` engine calls for every rollout of every group;
    ``informative(batch, draw, group)``: whether that group's returns differ (0 and 1) or are
    all 0 (what dynamic sampling's filter reads; its extra draws are played likewise)."""
    G = cfg.rollout.group_size

    def groups(b, d, n_groups, first, runner, stats):
        if b == fail_at:
            raise ValueError(f"env exploded in batch {b}")
        n = n_groups * G
        eps = [EpisodeResult(first + g // G, first * G + g, "t", "c", 0) for g in range(n)]
        for _ in range(steps):
            for ep, gen in zip(eps, runner.backend.generate([[1]] * n, None)):
                # the version tag is the version of the weights the engine really held
                assert gen.extra["held"] == gen.extra["policy_version"]
                won = informative(b, d, ep.group) and ep.traj % 2 == 1
                ep.steps.append(
                    StepRecord(
                        [1],
                        gen.token_ids,
                        gen.logprobs,
                        None,
                        "",
                        "a",
                        "",
                        "stop",
                        "",
                        0,
                        float(won) / steps,
                        True,
                        0,
                        policy_version=gen.extra["policy_version"],
                    )
                )
        stats.episodes += n
        return eps

    def play(b, runner, stats):
        return groups(b, 0, cfg.rollout.tasks_per_iter, 0, runner, stats)

    learner = SimpleNamespace(version=0)

    def load(weights):
        engine.weights = weights["version"]

    prod = Producer(cfg, None, SimpleNamespace(backend=engine), learner, engine, None, play=play,
                    load=load, take_snapshot=lambda: {"version": learner.version})  # fmt: skip
    prod.fake_learner = learner
    prod._play_extra = lambda b, d, k, first, stats: groups(b, d, k, first, prod.runner, stats)
    return prod


def _train(
    prod: Producer, iterations: int, learner_delay: float, start: int = 0, rows=None
) -> list:
    """The learner's side of the recipe: take, 'update', publish; the ages of every used token
    (``rows``: a list to append each iteration's ``(episodes, metrics, stats)`` to)."""
    ages = []
    prod.fake_learner.version = start
    prod.start(start)
    r = prod.cfg.rollout
    try:
        for it in range(start, iterations):
            eps, metrics, stats = prod.take(it)
            if rows is not None:
                rows.append((eps, metrics, stats))
            if not r.dynamic_sampling:
                assert len(eps) == r.tasks_per_iter * r.group_size
                assert stats.episodes == len(eps)
            ages.append([it - s.policy_version for ep in eps for s in ep.steps])
            assert metrics["async/staleness_max"] == max(ages[-1])
            time.sleep(learner_delay)
            prod.fake_learner.version = it + 1
            prod.publish(it + 1)
    finally:
        prod.close()
    return ages


@settings(max_examples=30, deadline=None)
@given(
    k=st.integers(1, 3),
    partial=st.booleans(),
    iterations=st.integers(1, 6),
    steps=st.integers(1, 3),
    slow=st.sampled_from(["learner", "producer"]),
    start=st.integers(0, 2),
    dynamic=st.sampled_from([None, "pad", "keep"]),
)
def test_no_used_token_is_more_than_k_versions_old(
    k, partial, iterations, steps, slow, start, dynamic
):
    """Under a slow learner or a slow producer, with or without partial rollouts, with or
    without dynamic sampling (its extra groups included; about half the groups uninformative)."""
    iterations += start
    fast, slow_s = 0.0, 0.003
    engine = _Engine(slow_s if slow == "producer" else fast)
    cfg = _cfg(k, partial, iterations, tasks=3)
    if dynamic:
        cfg.rollout.dynamic_sampling, cfg.rollout.when_short = True, dynamic
    prod = _producer(cfg, engine, steps, informative=lambda b, d, g: (b + d + g) % 2 == 0)
    rows = []
    ages = _train(prod, iterations, slow_s if slow == "learner" else fast, start, rows)
    assert len(ages) == iterations - start
    for i, it_ages in enumerate(ages):
        assert all(0 <= a <= k for a in it_ages)
        if dynamic == "pad":
            assert len(rows[i][0]) == 3 * 2
        if not partial:  # the fixed lag: batch b sampled wholly with version max(b - k, start)
            assert set(it_ages) == {min(k, i)}
    assert prod.buffer.dropped == 0  # the gate keeps every group within the bound
    assert not any(t.name == "agentrl-producer" for t in threading.enumerate())


def test_the_buffer_drops_and_counts_groups_older_than_k():
    prod = _producer(_cfg(1, False, 3), _Engine(0.0), 1)
    prod.start(0)
    try:
        eps, _, _ = prod.take(0)
        # the learner skipped ahead two versions: batch 1 (version 0) is now 2 behind, dropped
        for v in (1, 2):
            prod.fake_learner.version = v
            prod.publish(v)
        eps, metrics, _ = prod.take(2)
    finally:
        prod.close()
    assert metrics["async/dropped_groups"] == 2 and prod.buffer.dropped == 2
    assert {s.policy_version for ep in eps for s in ep.steps} == {1}  # batch 2 at version 1


def test_a_dropped_group_leaves_the_last_iteration_short_instead_of_hanging():
    """Force the drop the gate prevents (one group of batch 1 sampled, as it were, by a version
    long gone): iteration 1 fills the gap from batch 2, so the last iteration finds one group
    fewer than it asks for, and takes them instead of waiting for a batch that never comes."""
    cfg = _cfg(1, False, 3)
    prod = _producer(cfg, _Engine(0.0), 1)
    play = prod._play

    def stale_group_in_batch_1(b, runner, stats):
        eps = play(b, runner, stats)
        if b == 1:
            for ep in eps[: cfg.rollout.group_size]:
                ep.steps = [dataclasses.replace(s, policy_version=-5) for s in ep.steps]
        return eps

    prod._play = stale_group_in_batch_1
    rows: list = []
    runner = threading.Thread(target=lambda: rows.append(_take_all(prod, 3)), daemon=True)
    runner.start()
    runner.join(timeout=30)
    hung = runner.is_alive()
    if hung:
        prod.close()
    assert not hung, "the learner waited for a batch the producer never plays"
    [(sizes, metrics)] = rows
    g = cfg.rollout.group_size
    assert sizes == [2 * g, 2 * g, 1 * g]  # the third iteration lacks the dropped group
    assert [m["async/dropped_groups"] for m in metrics] == [0, 1, 0]
    assert [m["async/short_groups"] for m in metrics] == [0, 0, 1]
    assert not any(t.name == "agentrl-producer" for t in threading.enumerate())


def _take_all(prod: Producer, iterations: int) -> tuple[list[int], list[dict]]:
    sizes, metrics = [], []
    prod.start(0)
    try:
        for it in range(iterations):
            eps, m, _ = prod.take(it)
            sizes.append(len(eps))
            metrics.append(m)
            prod.fake_learner.version = it + 1
            prod.publish(it + 1)
    finally:
        prod.close()
    return sizes, metrics


def test_a_producer_that_raises_ends_the_take_with_its_message():
    prod = _producer(_cfg(1, False, 4), _Engine(0.0), 1, fail_at=1)
    with pytest.raises(ProducerError, match="ValueError: env exploded in batch 1"):
        _train(prod, 4, 0.0)
    assert not any(t.name == "agentrl-producer" for t in threading.enumerate())


def test_a_producer_stops_mid_batch_when_closed():
    engine = _Engine(0.05)
    prod = _producer(_cfg(2, True, 50), engine, 20)
    prod.start(0)
    time.sleep(0.1)
    t0 = time.perf_counter()
    prod.close()
    assert time.perf_counter() - t0 < 1.0  # at its next engine call, not after the batch
    assert not any(t.name == "agentrl-producer" for t in threading.enumerate())


@pytest.mark.parametrize("when_short", ["pad", "keep"])
def test_dynamic_sampling_filters_each_batch_within_the_bound(when_short):
    """k = 1 with dynamic sampling: batch b's group 1 never informative, its extra draws'
    groups informative only in odd batches. The producer drops, counts and refills as the
    synchronous filter does; extra groups are played with the batch's own weights (exactly k
    versions old), before the next batch."""
    cfg = _cfg(1, False, 4, tasks=2, group=2)
    cfg.rollout.dynamic_sampling, cfg.rollout.max_extra_rollouts = True, 2  # one extra group
    cfg.rollout.when_short = when_short
    prod = _producer(
        cfg, _Engine(0.001), 2, informative=lambda b, d, g: g == 0 or (d > 0 and b % 2 == 1)
    )
    rows = []
    ages = _train(prod, 4, 0.002, rows=rows)
    for it, ((eps, m, stats), it_ages) in enumerate(zip(rows, ages)):
        assert set(it_ages) == {min(1, it)}  # extra groups too: at most (here exactly) k old
        refilled = it % 2 == 1  # the extra group was informative
        assert m["rollout/dynamic_sampling/dropped_groups"] == (1 if refilled else 2)
        assert m["rollout/dynamic_sampling/extra_rollouts"] == 2
        assert m["rollout/dynamic_sampling/drawn_rollouts"] == 6 == stats.episodes
        assert m["rollout/dynamic_sampling/short"] == (0 if refilled else 1)
        groups = sorted({ep.group for ep in eps})
        if refilled:  # group 1 dropped, the extra group (numbered after the batch's) kept
            assert groups == [0, 2]
        elif when_short == "pad":  # the batch stays full: padded with a dropped group
            assert len(groups) == 2 and 0 in groups
        else:  # keep: trained short
            assert groups == [0]
        assert len(eps) == 2 * len(groups)
        assert m["async/dropped_groups"] == 0
    assert not any(t.name == "agentrl-producer" for t in threading.enumerate())


# -- end to end --------------------------------------------------------------------------------
def _run(tmp_path, *overrides):
    train(load_config(make_cfg(*SMOKE, "trainer.eval_initial=false", *overrides)), tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["phase"] == "train"]


_DS = ("rollout.dynamic_sampling=true", "rollout.max_extra_rollouts=8", "env.max_steps=4")


def _same(a, b, rel=1e-6, abs_=1e-7):
    for k, v in a.items():
        if k.startswith(("train/", "loss/", "credit/")):
            assert v == pytest.approx(b[k], rel=rel, abs=abs_), k


def test_two_iterations_at_k1_against_the_synchronous_loop(tmp_path):
    sync = _run(tmp_path / "sync")
    k1 = _run(tmp_path / "k1", "rollout.staleness=1")
    assert not any(k.startswith("async/") for k in sync[0])
    # batch 0 is sampled with version 0 either way: the first iteration is the synchronous one
    _same(sync[0], k1[0])
    assert k1[0]["async/staleness_max"] == 0
    # batch 1 was played while update 1 ran, with version 0: every token one version old
    assert k1[1]["async/staleness_mean"] == k1[1]["async/staleness_max"] == 1
    assert k1[1]["async/dropped_groups"] == 0
    assert (tmp_path / "k1" / "checkpoints" / "final" / "model.safetensors").exists()
    assert not any(t.name == "agentrl-producer" for t in threading.enumerate())


def test_dynamic_sampling_at_k1_draws_as_the_synchronous_loop(tmp_path):
    """Batch 0 with its extra draws is sampled with version 0 either way: the first iteration,
    dynamic sampling's counts included, is the synchronous one; the second's extra groups are
    one version old like the rest of its batch."""
    sync = _run(tmp_path / "sync", *_DS)
    k1 = _run(tmp_path / "k1", *_DS, "rollout.staleness=1")
    # the same episodes (train/* exactly); the producer's copy of the policy samples them, and its
    # log-probs equal the learner's module's to float32 noise, which moves the near-zero policy
    # loss by about 1e-7 on some CPUs (1.3e-7 on one)
    _same(sync[0], k1[0], abs_=1e-6)
    assert all(k1[0][k] == v for k, v in sync[0].items() if k.startswith("train/")), "episodes"
    for key, v in sync[0].items():
        if key.startswith("rollout/dynamic_sampling/"):
            assert k1[0][key] == v, key
    assert k1[1]["async/staleness_mean"] == k1[1]["async/staleness_max"] == 1
    assert k1[1]["rollout/dynamic_sampling/extra_rollouts"] <= 8
    drawn = k1[1]["rollout/dynamic_sampling/drawn_rollouts"]
    assert drawn == 2 * 4 + k1[1]["rollout/dynamic_sampling/extra_rollouts"]


@pytest.mark.parametrize(
    "k, extra",
    [(1, ()), (1, _DS), (2, ("trainer.iterations=3", "trainer.keep_checkpoints=3"))],
    ids=["k1", "k1-dynamic_sampling", "k2"],
)
def test_a_resumed_async_run_continues_exactly(tmp_path, k, extra):
    """In-flight groups are not checkpointed, but the versions they sample with are: a run
    resumed from the checkpoint after iteration 1 plays its next batches (with dynamic sampling:
    and their extra draws) with the versions the uninterrupted run used, and trains as it did."""
    whole = _run(tmp_path / "run", f"rollout.staleness={k}", *extra)
    ck = tmp_path / "run" / "checkpoints" / "iter_000001" / "state.pt"
    kept = torch.load(ck, weights_only=True)["rollout_weights"]
    assert sorted(kept) == [0]  # version 0: what batches 1 .. k sample with
    resumed = _run(tmp_path / "a", f"rollout.staleness={k}", f"trainer.resume={ck}", *extra)
    assert len(resumed) == len(whole)  # the history rows come back, then the new ones
    for a, b in zip(resumed[1:], whole[1:], strict=True):
        assert a["async/staleness_max"] == b["async/staleness_max"] == min(k, a["iteration"] - 1)
        # the same episodes (train/* exactly); the update's numbers as the uninterrupted run's
        assert all(a[key] == v for key, v in b.items() if key.startswith("train/")), "episodes"
        _same(a, b)
        for key, v in b.items():
            if key.startswith("rollout/dynamic_sampling/"):
                assert a[key] == v, key


def test_partial_rollouts_resume_from_the_checkpoints_weights(tmp_path):
    """With partial rollouts the versions depend on the threads' timing: no versions are kept,
    and the resumed run's first batch starts from the checkpoint's weights."""
    _run(tmp_path / "run", "rollout.staleness=1", "rollout.partial_rollouts=true")
    ck = tmp_path / "run" / "checkpoints" / "iter_000001" / "state.pt"
    assert torch.load(ck, weights_only=True)["rollout_weights"] == {}
    a = _run(tmp_path / "a", "rollout.staleness=1", "rollout.partial_rollouts=true",
             f"trainer.resume={ck}")  # fmt: skip
    assert a[1]["async/staleness_max"] == 0


def test_a_failing_producer_ends_the_run_with_its_message_and_leaves_nothing(tmp_path, monkeypatch):
    real = Producer._play_batch

    def boom(self, b, runner, stats):
        if b == 1:
            raise RuntimeError("the env server went away")
        return real(self, b, runner, stats)

    monkeypatch.setattr(Producer, "_play_batch", boom)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(ProducerError, match="the env server went away"):
        _run(tmp_path, "rollout.staleness=1", "env.num_workers=1")
    assert not any(t.name == "agentrl-producer" for t in threading.enumerate())
    # multiprocessing's forkserver and resource tracker serve the whole interpreter: not ours
    shared = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")
    left = [
        p
        for p in psutil.Process().children(recursive=True)
        if p.pid not in before and not any(x in " ".join(p.cmdline()) for x in shared)
    ]
    _, alive = psutil.wait_procs(left, timeout=30)
    alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, [" ".join(p.cmdline()) for p in alive]


def test_ctrl_c_in_the_learner_stops_the_producer(tmp_path, monkeypatch):
    from agentrl.learner import Learner

    def interrupted(self, *a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(Learner, "update", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, "rollout.staleness=2")
    assert not any(t.name == "agentrl-producer" for t in threading.enumerate())
