"""The rollout loop: groups share their start, only live envs are prompted, bad output is invalid;
the episode runner chunks and seeds exactly as the training loop always has."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.backends.base import SamplingParams
from agentrl.backends.hf import HFBackend
from agentrl.rollout import (
    ActionFormat,
    EpisodeRunner,
    PromptBuilder,
    PromptConfig,
    ResetSpec,
    RolloutStats,
    RunnerSettings,
    Turn,
    chunk_seed,
    eval_seed,
    run_episodes,
    to_step_batch,
)


class CountingBackend:
    """The real HF backend, recording how many prompts each call received."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def generate(self, prompts, sampling, allowed=None):
        self.calls.append(len(prompts))
        return self.inner.generate(prompts, sampling, allowed)

    def update_weights(self, sd):
        pass

    def close(self):
        pass


def _builder(tok, **kw):
    cfg = {
        "instruction": False,
        "history": 0,
        "admissible_actions": False,
        "observation_prefix": "",
    }
    cfg.update(kw)
    return PromptBuilder(tok, PromptConfig(**cfg))


def test_groups_start_from_the_same_state_and_only_live_envs_are_prompted(tiny, sokoban_pool):
    model, tok = tiny
    backend = CountingBackend(HFBackend(model, tok.pad_token_id))
    resets = [ResetSpec(g, seed=7 + g) for g in range(2) for _ in range(4)]
    eps = run_episodes(
        sokoban_pool,
        backend,
        _builder(tok),
        ActionFormat(),
        resets,
        SamplingParams(max_new_tokens=8, seed=0),
        max_steps=10,
        constrained=True,
    )
    for g in range(2):
        group = [e for e in eps if e.group == g]
        assert len({e.steps[0].observation for e in group}) == 1
        assert len({e.steps[0].state_key for e in group}) == 1
        assert len({e.task_id for e in group}) == 1
    lengths = [len(e.steps) for e in eps]
    live_per_step = [sum(n > t for n in lengths) for t in range(max(lengths))]
    assert backend.calls == live_per_step
    assert all(s.valid for e in eps for s in e.steps)  # constrained decoding: every action valid
    assert all(e.terminated == e.won for e in eps)


def test_empty_endless_and_garbage_output_are_invalid_actions(tiny, sokoban_pool):
    model, tok = tiny
    stats = RolloutStats()
    resets = [ResetSpec(0, seed=1)] * 8
    # Unconstrained random model: garbage; a 3-token cap makes most responses endless.
    eps = run_episodes(
        sokoban_pool,
        HFBackend(model, tok.pad_token_id),
        _builder(tok),
        ActionFormat(),
        resets,
        SamplingParams(max_new_tokens=3, seed=0),
        max_steps=3,
        constrained=False,
        stats=stats,
    )
    steps = [s for e in eps for s in e.steps]
    assert len(steps) == 24 and all(not s.valid for s in steps if s.action is None)
    assert any(s.finish_reason == "length" and s.action is None for s in steps)
    batch, _ = to_step_batch(eps)
    assert all(
        str(k).startswith("<invalid:") for k, v in zip(batch.action_key, batch.valid) if not v
    )
    assert all(e.truncated for e in eps)


def test_action_parsing_cases():
    fmt = ActionFormat()
    assert fmt.parse("<action> up </action>").action == "up"
    assert (
        fmt.parse("<action>up</action> then <action>left</action>").action == "left"
    )  # the last one
    assert fmt.parse("").action is None and fmt.parse("").reason == "empty response"
    assert fmt.parse("up").action is None
    assert fmt.parse("<action></action>").action is None
    assert fmt.parse("<action>" + "x" * 600 + "</action>").reason == "action too long"
    assert (
        fmt.parse("<action>up", finish_reason="length").reason
        == "no action tag before the token limit"
    )
    think = ActionFormat(think=True, require_think=True)
    assert think.parse("<think>push it</think><action>down</action>").action == "down"
    assert think.parse("<action>down</action>").action is None
    assert (
        ActionFormat(think=True)
        .parse("<think><action>up</action></think><action>left</action>")
        .action
        == "left"
    )
    assert ActionFormat(pattern=None).parse("  go north \n").action == "go north"


@given(st.text(max_size=300))
@settings(max_examples=200, deadline=None)
def test_parsing_never_raises(text):
    for fmt in (ActionFormat(), ActionFormat(think=True), ActionFormat(pattern=None)):
        p = fmt.parse(text)
        assert p.action is None or (p.action and p.action == p.action.strip())


def test_prompt_limit_drops_oldest_history_first_and_keeps_instruction_and_observation(tiny):
    _, tok = tiny
    b = _builder(
        tok,
        instruction=True,
        history=-1,
        admissible_actions=True,
        observation_prefix="Now:\n",
        max_prompt_tokens=10_000,
    )
    hist = [
        Turn(f"observation number {i} " + "word " * 10, f"<action>a{i}</action>") for i in range(8)
    ]
    full = b.build("Solve the task.", hist, "CURRENT", ["up", "down"])
    b.cfg = PromptConfig(**{**b.cfg.__dict__, "max_prompt_tokens": len(full) - 1})
    cut = b.build("Solve the task.", hist, "CURRENT", ["up", "down"])
    assert len(cut) < len(full)
    text = tok.decode(cut)
    assert "Solve the task." in text and "CURRENT" in text and "up, down" in text
    assert (
        "observation number 7" in text and "observation number 0" not in text
    )  # oldest dropped first
    # kept turns are a suffix of the history
    kept = [i for i in range(8) if f"observation number {i} " in text]
    assert kept == list(range(kept[0], 8))
    # A limit below instruction + observation keeps them whole and counts the overflow.
    b.cfg = PromptConfig(**{**b.cfg.__dict__, "max_prompt_tokens": 5})
    tiny_prompt = b.build("Solve the task.", hist, "CURRENT", None)
    assert "CURRENT" in tok.decode(tiny_prompt) and b.overflows == 1


def test_history_window_and_chat_template(tiny):
    _, tok = tiny
    b = _builder(tok, instruction=True, history=2, admissible_actions=False, observation_prefix="")
    hist = [Turn(f"o{i}", f"r{i}") for i in range(5)]
    msgs = b.messages("INSTR", hist[-2:], "now", None)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    ids = b.build("INSTR", hist, "now", None)
    text = tok.decode(ids, skip_special_tokens=False)
    assert text.startswith("<|system|>INSTR") and text.endswith("<|user|>now<|end|><|assistant|>")
    assert "o2" not in text and "o3" in text and "o4" in text


def test_step_batch_columns(tiny, sokoban_pool):
    model, tok = tiny
    resets = [ResetSpec(g, seed=3 + g) for g in range(2) for _ in range(4)]
    eps = run_episodes(
        sokoban_pool,
        HFBackend(model, tok.pad_token_id),
        _builder(tok),
        ActionFormat(),
        resets,
        SamplingParams(max_new_tokens=8, seed=1),
        max_steps=10,
        constrained=True,
    )
    batch, seqs = to_step_batch(eps)
    assert np.array_equal(batch.reward, [s.reward for e in eps for s in e.steps])
    assert batch.done.sum() == len(eps)
    assert set(batch.success) <= {True, False} and batch.success.sum() == sum(
        len(e.steps) for e in eps if e.won
    )
    assert list(batch.extras["observation"]) == [s.observation for e in eps for s in e.steps]
    assert all(s.allowed is not None for s in seqs)


def test_chunk_and_eval_seeds_are_pinned():
    # The trainer's seed rule (changing it would change every training run's metrics).
    def ref(*parts):
        return int(np.random.SeedSequence(list(parts)).generate_state(1)[0]) & 0x7FFFFFFF

    assert chunk_seed(0, 3, 2) == ref(0, 3, 2) and chunk_seed(5) == ref(5)
    assert eval_seed(0) == chunk_seed(0, 999_999) == ref(0, 999_999)
    assert all(0 <= chunk_seed(s, k) < 2**31 for s in range(3) for k in range(20))
    assert len({chunk_seed(s, k) for s in range(3) for k in range(20)}) == 60


def test_runner_plays_chunks_of_the_pool_size_with_per_chunk_seeds(tiny, sokoban_pool):
    model, tok = tiny
    backend = CountingBackend(HFBackend(model, tok.pad_token_id))
    settings = RunnerSettings(max_steps=3, max_new_tokens=6, constrained=True)
    runner = EpisodeRunner(sokoban_pool, backend, _builder(tok), ActionFormat(), tok, settings)
    resets = [ResetSpec(g, seed=20 + g) for g in range(10)]  # a pool of 8: chunks at 0 and 8
    chunks, stats, ended = [], RolloutStats(), []
    eps = runner.play(
        resets,
        temperature=1.0,
        seed=11,
        traj_offset=100,
        stats=stats,
        on_chunk=chunks.append,
        on_episode=lambda k, ep: ended.append((k, ep)),
    )
    assert [len(c) for c in chunks] == [8, 2] and [e for c in chunks for e in c] == eps
    # each episode as it ended, with its index in the resets (chunk 2 after chunk 1)
    assert sorted(k for k, _ in ended) == list(range(10)) and all(eps[k] is e for k, e in ended)
    assert {k for k, _ in ended[:8]} == set(range(8))
    assert [e.traj for e in eps] == list(range(100, 110))
    assert [e.sampling_seed for e in eps] == [chunk_seed(11, 0)] * 8 + [chunk_seed(11, 8)] * 2
    assert stats.engine_calls == len(backend.calls) > 0
    # The same episodes as the loop itself, chunk by chunk, with those seeds.
    for start, chunk in ((0, eps[:8]), (8, eps[8:])):
        ref = run_episodes(
            sokoban_pool,
            HFBackend(model, tok.pad_token_id),
            _builder(tok),
            ActionFormat(),
            resets[start : start + 8],
            runner.sampling(1.0, chunk_seed(11, start)),
            max_steps=3,
            constrained=True,
            traj_offset=100 + start,
        )
        assert [[s.response_ids for s in e.steps] for e in ref] == [
            [s.response_ids for s in e.steps] for e in chunk
        ]
    # seed_start shifts the chunk seeds (a sharded dynamic-sampling draw plays one process's
    # later chunk): the chunk at 0 then samples as the chunk at 8 did
    again = runner.play(resets[8:], temperature=1.0, seed=11, traj_offset=108, seed_start=8)
    assert [[s.response_ids for s in e.steps] for e in again] == [
        [s.response_ids for s in e.steps] for e in eps[8:]
    ]
    with pytest.raises(ValueError, match="max_steps"):
        RunnerSettings(max_steps=0, max_new_tokens=6)
    sp = runner.sampling(0.5, 7)
    assert (sp.max_new_tokens, sp.temperature, sp.seed) == (6, 0.5, 7)
    assert sp.stop_token_ids == (tok.eos_token_id,)


def test_a_rank_without_episodes_still_answers_every_lockstep_step(tiny, sokoban_pool):
    """Under torchrun a rank may hold no group of a dynamic-sampling draw: it still plays one
    empty chunk, reporting 0 live episodes each step until no rank has any."""
    model, tok = tiny
    backend = CountingBackend(HFBackend(model, tok.pad_token_id))
    settings = RunnerSettings(max_steps=5, max_new_tokens=6, constrained=True)
    runner = EpisodeRunner(sokoban_pool, backend, _builder(tok), ActionFormat(), tok, settings)
    others = [3, 2, 0]  # the other ranks' live episodes at each step
    calls = []

    def sync(n_live):
        calls.append(n_live)
        return 0, others[len(calls) - 1] > 0

    assert runner.play([], temperature=1.0, seed=0, step_sync=sync) == []
    assert calls == [0, 0, 0] and backend.calls == []
    assert runner.play([], temperature=1.0, seed=0) == []  # one process: nothing to play
    assert len(calls) == 3


class SpanningBackend(CountingBackend):
    """The real HF backend whose replies are labelled as the fleet labels a reply that spanned a
    weight update under partial rollouts (``extra["token_versions"]``: the first half version 3,
    the rest 4; ``policy_version`` the oldest)."""

    def generate(self, prompts, sampling, allowed=None):
        out = self.inner.generate(prompts, sampling, allowed)
        for g in out:
            half = len(g.token_ids) // 2
            g.extra["token_versions"] = [3] * half + [4] * (len(g.token_ids) - half)
            g.extra["policy_version"] = 3
        return out


def test_each_token_keeps_the_version_that_sampled_it(tiny, sokoban_pool):
    """A reply sampled across a weight update keeps its per-token versions from the engine to
    the step record, the learner's sequence and the trace; a reply of one version stores none."""
    from agentrl.evaluation.traces import step_line

    model, tok = tiny
    resets = [ResetSpec(0, seed=3) for _ in range(2)]
    eps = run_episodes(
        sokoban_pool,
        SpanningBackend(HFBackend(model, tok.pad_token_id)),
        _builder(tok),
        ActionFormat(),
        resets,
        SamplingParams(max_new_tokens=8, seed=1),
        max_steps=2,
        constrained=True,
    )
    steps = [s for e in eps for s in e.steps]
    _, seqs = to_step_batch(eps)
    for s, q in zip(steps, seqs, strict=True):
        half = len(s.response_ids) // 2
        want = [3] * half + [4] * (len(s.response_ids) - half)
        assert s.policy_version == 3
        assert s.versions() == q.versions == want
        if half:  # two versions: recorded per token
            assert s.token_versions == want
        assert step_line(s, 0, decode=None, max_chars=100)["tokens"]["version"] == want
    one = dataclasses.replace(steps[0], token_versions=None, policy_version=7)
    assert one.versions() == [7] * len(one.response_ids)


def test_the_hf_engine_streams_each_requests_tokens_as_sampled(tiny):
    """``on_tokens`` gets every request's tokens in order, over several chunks and with a
    trie's forced runs, and they add up to the Generation; the sample is the one a call
    without it gives (streaming changes nothing), and a sink that fails only stops its stream."""
    model, tok = tiny
    backend = HFBackend(model, tok.pad_token_id, max_batch_size=2)  # 3 prompts: 2 chunks
    prompts = [[5, 9, 13], [7, 7], [21, 4, 4, 8]]
    allowed = [None, [[30, 31, 32, 33], [30, 40]], None]  # 30 forced, then a branch
    sampling = SamplingParams(max_new_tokens=6, temperature=1.0, seed=3,
                              stop_token_ids=(tok.eos_token_id,))  # fmt: skip
    got: dict[int, list[list[int]]] = {0: [], 1: [], 2: []}
    streamed = backend.generate(prompts, sampling, allowed,
                                on_tokens=lambda i, ids: got[i].append(list(ids)))  # fmt: skip
    plain = backend.generate(prompts, sampling, allowed)
    for i, g in enumerate(streamed):
        assert g.token_ids == plain[i].token_ids and g.logprobs == plain[i].logprobs
        assert [t for piece in got[i] for t in piece] == g.token_ids
        assert all(got[i])  # no empty piece
    assert len(got[0]) == len(streamed[0].token_ids) > 1  # free sampling: a token a piece
    assert got[1][0][0] == 30  # the forced token before the first forward pass

    def broken(i, ids):
        raise RuntimeError("the reader is gone")

    assert [g.token_ids for g in backend.generate(prompts, sampling, allowed, on_tokens=broken)] \
        == [g.token_ids for g in plain]  # fmt: skip
