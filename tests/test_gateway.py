"""The OpenAI-compatible gateway, driven by the real ``openai`` SDK on loopback, in front of the
embedded tiny model on the Hugging Face backend; and a 2-iteration ``env=agent`` training run of
an openai-SDK agent program."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
import torch
from gateway_agent import TOOLS  # the agent program's own tool, one definition
from hydra import compose, initialize_config_module

from agentrl import envs
from agentrl.backends.base import SamplingParams
from agentrl.backends.hf import HFBackend
from agentrl.config import load_config
from agentrl.episodes import RolloutStats
from agentrl.gateway import Gateway
from agentrl.gateway.runner import AgentRunner, load_agent
from agentrl.learner.forward import response_forward
from agentrl.learner.sequences import StepSequence, collate
from agentrl.models import load_model
from agentrl.pool import EnvSpec, ResetSpec, make_pool
from agentrl.recipe import train
from agentrl.rollout.runner import RunnerSettings

torch.set_num_threads(1)

AGENT = Path(__file__).with_name("gateway_agent.py")
CALL = '<tool_call>\n{"name": "lookup", "arguments": {"name": "A"}}\n</tool_call>'


class Forced:
    """The HF backend with its sampling restricted to one given text per call (constrained
    decoding, a real backend feature): the tiny model's samples are noise, so a test that needs
    a tool call asks for one. Sampling and log-probs are still the engine's."""

    def __init__(self, inner: HFBackend, tok):
        self.inner, self.tok, self.texts = inner, tok, []

    def generate(self, prompts, sampling, allowed=None):
        ids = self.tok(self.texts.pop(0), add_special_tokens=False)["input_ids"]
        seq = [*ids, self.tok.eos_token_id]
        return self.inner.generate(prompts, sampling, allowed=[[seq]] * len(prompts))

    def update_weights(self, state_dict):
        pass

    def close(self):
        pass


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model, tok, _ = load_model("tiny")
    return model, tok


@pytest.fixture(scope="module")
def tasks_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("agent") / "tasks.jsonl"
    path.write_text('{"id": "t0", "question": "Where is A?"}\n{"id": "boom", "question": "?"}\n')
    return path


@pytest.fixture(scope="module")
def gateway(tiny):
    model, tok = tiny
    backend = HFBackend(model, tok.pad_token_id)
    with Gateway(backend, tok, max_tokens=12) as gw:
        gw.start()
        yield gw


@pytest.fixture(scope="module")
def forced(tiny):
    model, tok = tiny
    backend = Forced(HFBackend(model, tok.pad_token_id), tok)
    with Gateway(backend, tok, max_tokens=128) as gw:
        gw.start()
        yield gw, backend


def template_ids(tok, msgs, tools=None) -> list[int]:
    """The chat template's rendering of ``msgs``, tokenised as the gateway must do it."""
    kw = {"tools": tools} if tools else {}
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False, **kw)
    return tok(text, add_special_tokens=False)["input_ids"]


def client(gw: Gateway, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0)


MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Where is A?"}]


def test_models_and_a_completion_record_the_engines_exact_tokens(gateway, tiny):
    c = client(gateway, "plain")
    assert [m.id for m in c.models.list().data] == ["agentrl-policy"]
    r = c.chat.completions.create(model="x", messages=MSGS, temperature=1.0, max_tokens=8)
    choice = r.choices[0]
    assert choice.finish_reason in ("stop", "length") and choice.message.tool_calls is None
    rec = gateway.sessions.get("plain").calls[0]
    assert r.usage.prompt_tokens == len(rec.prompt_ids)
    assert r.usage.completion_tokens == len(rec.response_ids) == len(rec.logprobs) <= 8
    _, tok = tiny
    # the prompt is the chat template's, the content the decoded sample
    assert rec.prompt_ids == template_ids(tok, MSGS)
    assert choice.message.content == tok.decode(rec.response_ids, skip_special_tokens=True)
    # the recorded ids are what the engine samples for that prompt, seed and request id
    assert_engine_sampled(gateway, rec, tok)


def assert_engine_sampled(gw: Gateway, rec, tok, temperature: float = 1.0) -> None:
    """The call's recorded ids and log-probs are what the engine samples again for its prompt,
    seed and request id."""
    s = rec.sampling
    again = gw.engine.backend.generate(
        [rec.prompt_ids],
        SamplingParams(max_new_tokens=s["max_new_tokens"], temperature=temperature,
                       stop_token_ids=(tok.eos_token_id,), seed=s["seed"],
                       request_ids=(s["request_id"],)),
    )[0]  # fmt: skip
    n = len(rec.response_ids)
    if not rec.request.get("stop"):  # a stop string cuts the response after the token ending it
        assert len(again.token_ids) == n
    assert again.token_ids[:n] == rec.response_ids
    assert again.logprobs[:n] == pytest.approx(rec.logprobs, abs=1e-4)


def test_streaming_gives_the_same_reply_as_a_plain_call_with_the_same_seed(gateway):
    plain = client(gateway, "seeded-a").chat.completions.create(
        model="x", messages=MSGS, seed=7, max_tokens=10
    )
    stream = client(gateway, "seeded-b").chat.completions.create(
        model="x", messages=MSGS, seed=7, max_tokens=10, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == plain.choices[0].message.content
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    assert finishes[-1] == plain.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens


@pytest.mark.parametrize("stop", [None, ["e"], [" t", "ou"]], ids=["no-stop", "stop", "stops"])
def test_a_streamed_reply_comes_in_pieces_that_add_up_to_the_plain_reply(
    gateway, stop, monkeypatch
):
    """The HF engine streams: a reply with no tools arrives in several content pieces as it is
    sampled, and for any seed they add up to the plain call's content, stop strings (which cut
    the reply where one first appears) included."""
    monkeypatch.setattr(gateway, "stream_interval_s", 0.0)  # a piece whenever tokens come
    pieces_seen = 0
    for seed in range(6):
        kw = dict(model="x", messages=MSGS, seed=seed, max_tokens=12, temperature=1.0, stop=stop)
        plain = client(gateway, f"pieces-a-{seed}-{stop}").chat.completions.create(**kw)
        stream = client(gateway, f"pieces-b-{seed}-{stop}").chat.completions.create(
            stream=True, **kw
        )
        chunks = list(stream)
        pieces = [ch.choices[0].delta.content for ch in chunks if ch.choices]
        pieces = [p for p in pieces if p]
        assert "".join(pieces) == (plain.choices[0].message.content or "")
        assert chunks[-1].choices[0].finish_reason == plain.choices[0].finish_reason
        pieces_seen = max(pieces_seen, len(pieces))
    assert pieces_seen >= 3  # the old path sent the content in one piece


class DiesMidway:
    """The HF engine that hands over its first tokens, then fails (an engine dying mid-reply)."""

    streams = True

    def __init__(self, inner: HFBackend):
        self.inner = inner

    def generate(self, prompts, sampling, allowed=None, on_tokens=None):
        gens = self.inner.generate(prompts, sampling, allowed)
        if on_tokens is not None:
            on_tokens(0, gens[0].token_ids[:2])
            time.sleep(0.5)  # the stream has begun by then
        raise RuntimeError("the engine died")

    def update_weights(self, state_dict):
        pass

    def close(self):
        pass


def test_a_streamed_reply_errs_before_its_stream_as_http_and_after_as_an_event(gateway, tiny):
    """A bad streamed request is an HTTP error, not a stream; a client that leaves mid-stream
    leaves the call recorded and the gateway serving; an engine that fails after the first
    pieces ends the stream with OpenAI's error event."""
    body = {"model": "x", "messages": MSGS, "stream": True, "max_tokens": 10**6}
    head = {"Authorization": "Bearer leaver"}
    r = httpx.post(f"{gateway.base_url}/chat/completions", json=body, headers=head)
    assert r.status_code == 400 and "max_tokens" in r.json()["error"]["message"]
    body["max_tokens"] = 12
    with httpx.stream("POST", f"{gateway.base_url}/chat/completions", json=body,
                      headers=head) as r:  # fmt: skip
        assert r.status_code == 200
        next(r.iter_lines())  # the first event, then the client goes
    deadline = time.monotonic() + 10
    while not gateway.sessions.get("leaver").calls and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(gateway.sessions.get("leaver").calls) == 1
    assert client(gateway, "after-leaver").chat.completions.create(model="x", messages=MSGS)
    model, tok = tiny
    with Gateway(DiesMidway(HFBackend(model, tok.pad_token_id)), tok, max_tokens=12) as gw:
        gw.start()
        with httpx.stream("POST", f"{gw.base_url}/chat/completions", json=body,
                          headers=head) as r:  # fmt: skip
            events = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert r.status_code == 200
    assert '"content":' in events[1] and "the engine died" in events[-1]
    assert json.loads(events[-1][6:])["error"]["type"] == "server_error"


def test_a_tool_call_comes_back_as_tool_calls_and_the_next_call_extends_its_tokens(forced, tiny):
    gw, backend = forced
    _, tok = tiny
    c = client(gw, "tools")
    backend.texts = [CALL, "A is in B."]
    msgs = [{"role": "user", "content": "Where is A?"}]
    r = c.chat.completions.create(model="x", messages=msgs, tools=TOOLS)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    assert msg.tool_calls[0].function.name == "lookup"
    assert json.loads(msg.tool_calls[0].function.arguments) == {"name": "A"}
    msgs += [msg.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "A is in B."}]  # fmt: skip
    r2 = c.chat.completions.create(model="x", messages=msgs, tools=TOOLS)
    assert r2.choices[0].message.content == "A is in B." and r2.choices[0].finish_reason == "stop"
    first, second = gw.sessions.get("tools").calls
    # the tools are in the prompt, rendered by the template
    assert first.prompt_ids == template_ids(tok, msgs[:1], TOOLS)
    # one trajectory: call 2's prompt is call 1's prompt and sampled ids, never re-tokenised
    head = first.prompt_ids + first.response_ids
    assert second.reused and second.extends and second.prompt_ids[: len(head)] == head
    assert gw.sessions.get("tools").prefix_breaks == 0


def test_a_rewritten_history_trains_on_its_own_prompt_and_counts_a_prefix_break(forced):
    gw, backend = forced
    c = client(gw, "rewrite")
    backend.texts = ["<think>hmm</think>A is in B.", "ok"]
    msgs = [{"role": "user", "content": "Where is A?"}]
    r = c.chat.completions.create(model="x", messages=msgs)
    assert r.choices[0].message.content == "<think>hmm</think>A is in B."
    # the program drops the <think> block before sending the history back
    msgs += [{"role": "assistant", "content": "A is in B."}, {"role": "user", "content": "Sure?"}]
    c.chat.completions.create(model="x", messages=msgs)
    s = gw.sessions.get("rewrite")
    assert not s.calls[1].reused and not s.calls[1].extends and s.prefix_breaks == 1
    assert gw.sessions.prefix_breaks >= 1


def test_a_malformed_call_is_text_with_its_reason_recorded(forced):
    gw, backend = forced
    backend.texts = ['<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>']
    r = client(gw, "malformed").chat.completions.create(
        model="x", messages=[{"role": "user", "content": "hi"}], tools=TOOLS
    )
    assert r.choices[0].finish_reason == "stop" and r.choices[0].message.tool_calls is None
    assert "<tool_call>" in r.choices[0].message.content
    assert "unknown tool" in gw.sessions.get("malformed").calls[0].reply.parse_error


STRICT = [
    {"type": "function", "function": {
        "name": "search", "strict": True,
        "parameters": {"type": "object", "properties": {"query": {"type": "string",
                       "enum": ["N", "friend of N", "Q"]}},
                       "required": ["query"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "answer", "strict": True,
        "parameters": {"type": "object", "properties": {"text": {"type": "string", "enum": ["Q"]},
                                                        "sure": {"type": "boolean"}},
                       "required": ["text", "sure"], "additionalProperties": False}}},
]  # fmt: skip


def test_required_tool_choice_over_enums_samples_a_valid_call_the_learner_scores_alike(
    gateway, tiny
):
    """tool_choice="required" over finite schemas is enforced as OpenAI's strict functions are:
    the untrained model's every reply is a valid call, a named function gives that function,
    and the recorded step (its allowed token sets, its renormalised log-probs) is what the
    learner scores: the same log-probs within 1e-4."""
    model, tok = tiny
    c = client(gateway, "strict")
    msgs = [{"role": "user", "content": "Who is the friend of N?"}]
    allowed = {("search", json.dumps({"query": q})) for q in ("N", "friend of N", "Q")}
    allowed |= {("answer", json.dumps({"text": "Q", "sure": b})) for b in (False, True)}
    got = set()
    for seed in range(6):
        r = c.chat.completions.create(model="x", messages=msgs, tools=STRICT, seed=seed,
                                      tool_choice="required", max_tokens=64)  # fmt: skip
        (call,) = r.choices[0].message.tool_calls
        assert r.choices[0].finish_reason == "tool_calls"
        got.add((call.function.name, call.function.arguments))
    assert got <= allowed and len(got) > 1
    r = c.chat.completions.create(
        model="x", messages=msgs, tools=STRICT, max_tokens=64,
        tool_choice={"type": "function", "function": {"name": "answer"}},
    )  # fmt: skip
    assert r.choices[0].message.tool_calls[0].function.name == "answer"
    calls = gateway.sessions.get("strict").calls
    assert [x.sampling["allowed_calls"] for x in calls] == [5] * 6 + [2]
    # the steps as the learner sees them: its constrained log-probs equal the recorded ones
    seqs = [StepSequence(x.prompt_ids, x.response_ids, x.logprobs, k, x.allowed)
            for k, x in enumerate(calls)]  # fmt: skip
    assert all(len(x.allowed) == len(x.response_ids) for x in calls)
    assert calls[0].response_ids[-1] == tok.eos_token_id and min(map(len, calls[0].allowed)) == 1
    with torch.no_grad():
        out = response_forward(model, collate(seqs, tok.pad_token_id), 1.0)
    for k, x in enumerate(calls):
        n = len(x.response_ids)
        assert out.logprobs[k, :n].tolist() == pytest.approx(x.logprobs, abs=1e-4)
    # auto over the same tools, and required over a free-form schema: unconstrained as before
    c.chat.completions.create(model="x", messages=msgs, tools=STRICT, max_tokens=4)
    c.chat.completions.create(model="x", messages=msgs, tools=TOOLS, max_tokens=4,
                              tool_choice="required")  # fmt: skip
    assert [x.allowed for x in gateway.sessions.get("strict").calls[-2:]] == [None, None]
    with pytest.raises(openai.BadRequestError, match="tool_choice required needs tools"):
        c.chat.completions.create(model="x", messages=msgs, tool_choice="required")
    with pytest.raises(openai.BadRequestError, match="which tools does not declare"):
        c.chat.completions.create(model="x", messages=msgs, tools=STRICT,
                                  tool_choice={"type": "function", "function": {"name": "x"}})  # fmt: skip


def test_bad_requests_get_a_clear_4xx(gateway):
    c = client(gateway, "bad")
    with pytest.raises(openai.BadRequestError, match="temperature must be a number"):
        c.chat.completions.create(model="x", messages=MSGS, temperature="hot")
    with pytest.raises(openai.BadRequestError, match="messages must be a non-empty list"):
        c.chat.completions.create(model="x", messages=[])
    with pytest.raises(openai.BadRequestError, match=r"messages\[0\]: role must be one of"):
        c.chat.completions.create(model="x", messages=[{"role": "robot", "content": "hi"}])
    r = httpx.post(f"{gateway.base_url}/chat/completions", json={"messages": MSGS})
    assert r.status_code == 401 and "name a session" in r.json()["error"]["message"]
    r = httpx.post(f"{gateway.base_url}/sessions/plain/reward", json={"reward": "high"})
    assert r.status_code == 400 and "reward must be a finite number" in r.json()["error"]["message"]


def test_web_pages_foreign_hosts_big_bodies_and_big_caps_are_refused(gateway):
    """What one client may cost: no web page or rebound DNS name reaches it, a body is bounded,
    and so is the response cap a call asks for."""
    url = f"{gateway.base_url}/chat/completions"
    auth = {"Authorization": "Bearer guard"}
    r = httpx.post(url, json={"messages": MSGS}, headers={**auth, "Origin": "https://evil.example"})
    assert r.status_code == 403 and "web pages" in r.json()["error"]
    r = httpx.post(url, json={"messages": MSGS}, headers={**auth, "Host": "evil.example"})
    assert r.status_code == 403 and "not a name of this server" in r.json()["error"]
    big = b'{"messages": [{"role": "user", "content": "' + b"x" * gateway.max_body + b'"}]}'
    r = httpx.post(url, content=big, headers={**auth, "Content-Type": "application/json"})
    assert r.status_code == 413
    with pytest.raises(openai.BadRequestError, match="max_tokens may be at most 8192"):
        client(gateway, "guard").chat.completions.create(
            model="x", messages=MSGS, max_tokens=gateway.max_tokens_limit + 1
        )
    assert gateway.sessions.get("guard", create=True).calls == []  # nothing reached the engine


def test_a_session_header_overrides_the_key_and_the_reward_is_posted(gateway):
    c = openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0,
                      default_headers={"X-Session-Id": "by-header"})  # fmt: skip
    c.chat.completions.create(model="x", messages=MSGS, max_tokens=4)
    r = httpx.post(f"{gateway.base_url}/sessions/by-header/reward",
                   json={"reward": 1.0, "state_keys": ["s0"]})  # fmt: skip
    assert r.status_code == 200
    s = httpx.get(f"{gateway.base_url}/sessions/by-header").json()
    assert s["reward"] == 1.0 and len(s["calls"]) == 1 and s["calls"][0]["response_ids"]


def _train_rows(out, overrides):
    """Train the composed config into ``out``: its summary and its train rows."""
    with initialize_config_module("agentrl.configs", version_base=None):
        raw = compose("train", overrides=overrides)
    summary = train(load_config(raw), out)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return summary, [r for r in rows if r.get("phase") == "train"]


def test_an_openai_sdk_agent_program_trains_two_iterations(tmp_path):
    """2 groups of 2 per iteration; with seed 0 each iteration draws "boom" (its program raises)
    and one good task: the good episodes train, two calls (steps) each, the bad ones are cut and
    counted, and the run goes on."""
    tasks = tmp_path / "tasks.jsonl"
    rows = [
        {"id": f"t{i}", "category": "ask", "question": f"Where is {c}?"}
        for i, c in enumerate("ABCD")
    ]
    tasks.write_text("\n".join(json.dumps(r) for r in [*rows, {"id": "boom", "question": "?"}]))
    agent = Path(__file__).with_name("gateway_agent.py")
    summary, iters = _train_rows(tmp_path, [
        "env=agent", "trainer=smoke", f"env.kwargs.tasks={tasks}", f"env.kwargs.agent={agent}:play",
        "rollout.tasks_per_iter=2", "rollout.group_size=2", "trainer.eval_initial=false",
        "env.eval_episodes=2", "credit=grpo", "env.max_error_rate=0.9", "trainer.checkpoint_every=0",
    ])  # fmt: skip
    assert len(iters) == 2
    for r in iters:
        assert r["env/errors/exception"] == 2  # the two episodes of "boom"
        assert r["train/agent_steps"] == 4  # two good episodes, one step per call
        assert r["gateway/prefix_breaks"] == 0  # each call extends the one before
        assert r["loss/sequences_processed"] == 4
    assert summary.eval_episodes == 2 and summary.env == "Agent-v0"
    # the same program evaluated against the trained checkpoint, per category
    out = tmp_path / "eval"
    proc = subprocess.run(
        [sys.executable, "-m", "agentrl.evaluate", "agent=model", f"agent.path={tmp_path}",
         "env=agent", f"env.kwargs.tasks={tasks}", f"env.kwargs.agent={agent}:play",
         "episodes=2", f"hydra.run.dir={out}"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    assert [r["steps"] for r in results["episodes"]] == [2, 2]  # two calls each: the program played
    assert [g["category"] for g in results["groups"]] == ["ask", "all"]


@pytest.mark.parametrize(
    "program, fault, why",
    [
        ({"agent": f"{AGENT}:shaped"}, None, ""),
        ({"command": f"{sys.executable} {AGENT}"}, None, ""),
        ({"agent": f"{AGENT}:with_client"}, None, ""),
        ({"agent": f"{AGENT}:silent"}, "exception", "never called the model"),
        ({"agent": f"{AGENT}:hangs", "timeout": 1.0}, "timeout", "ran past 1 s"),
        ({"agent": f"{AGENT}:play"}, "exception", "raised RuntimeError: this task always fails"),
    ],
    ids=["step-rewards", "command", "task-and-client", "no-calls", "timeout", "raises"],
)
def test_the_agent_runner_turns_sessions_into_steps_or_cuts_the_episode(
    tiny, tasks_file, program, fault, why
):
    model, tok = tiny
    kwargs = {"tasks": str(tasks_file), **program}
    pool = make_pool([EnvSpec("Agent-v0", kwargs)] * 2, num_workers=0)
    runner = AgentRunner(pool, HFBackend(model, tok.pad_token_id), tok,
                         RunnerSettings(max_steps=4, max_new_tokens=8), syntax="hermes")  # fmt: skip
    stats = RolloutStats()
    try:
        task = "boom" if program.get("agent", "").endswith(":play") else "t0"
        resets = [ResetSpec(0, None, {"task_id": task})] * 2
        eps = runner.play(resets, temperature=1.0, seed=3, stats=stats)
    finally:
        runner.gateway.close()
        pool.close()
    assert [ep.fault for ep in eps] == [fault, fault]
    if fault is not None:
        assert all(why in ep.error for ep in eps) and stats.env_errors == {fault: 2}
        return
    for ep in eps:
        for s in ep.steps:  # the engine's own ids and log-probs, one per sampled token
            assert s.response_ids and len(s.logprobs) == len(s.response_ids) <= 8
    if program.get("agent", "").endswith(":shaped"):  # step rewards and state keys as given
        for ep in eps:
            assert [s.reward for s in ep.steps] == [0.25, 0.75] and ep.won
            assert [s.state_key for s in ep.steps] == ["start", "middle"]
            assert ep.steps[0].next_state_key == "middle"
            assert ep.steps[1].prompt_ids[: len(ep.steps[0].prompt_ids)] == ep.steps[0].prompt_ids
    else:  # one call, its reward (the command's last printed line, the function's value)
        assert [[s.reward for s in ep.steps] for ep in eps] == [[0.5], [0.5]]
    assert stats.episodes == 2 and stats.counters["gateway/prefix_breaks"] == 0


def test_an_openai_sdk_program_plays_search_v0_through_its_tools(tiny):
    """examples/agents/search_agent.py offers Search-v0's tools each turn as strict functions
    over the admissible queries and answers with tool_choice="required": the untrained model's
    every call is an admissible one, run by the env; the steps carry the engine's ids, the
    allowed token sets the learner needs and the env's state keys."""
    model, tok = tiny
    program = Path(__file__).parents[1] / "examples" / "agents" / "search_agent.py"
    pool = make_pool([EnvSpec("Agent-v0", {"env": "Search-v0", "agent": f"{program}:play"})] * 4,
                     num_workers=0)  # fmt: skip
    runner = AgentRunner(pool, HFBackend(model, tok.pad_token_id), tok,
                         RunnerSettings(max_steps=4, max_new_tokens=64), syntax="hermes")  # fmt: skip
    try:
        eps = runner.play([ResetSpec(0, s, None) for s in range(4)], temperature=1.0, seed=0)
    finally:
        runner.gateway.close()
        pool.close()
    steps = [s for ep in eps for s in ep.steps]
    assert all(ep.fault is None for ep in eps) and len(steps) > len(eps)  # some searched
    search = envs.make("Search-v0")  # the tasks are Search-v0's own seeded draws
    assert [ep.task_id for ep in eps] == [search.reset(seed=s)[1]["task_id"] for s in range(4)]
    for ep in eps:
        assert ep.steps[-1].action.startswith("answer(") or len(ep.steps) == 4
        assert ep.steps[0].state_key == f"{ep.task_id}|"
        for s in ep.steps:
            assert s.valid and s.action.startswith(("search(", "answer("))
            assert len(s.allowed) == len(s.logprobs) == len(s.response_ids)
            assert s.response_ids[-1] == tok.eos_token_id
            assert all(t in a for t, a in zip(s.response_ids, s.allowed))


SMOLAGENT = Path(__file__).parents[1] / "examples" / "agents" / "search_smolagent.py"


def test_a_smolagents_program_samples_through_the_gateway_as_the_engine_does(gateway, tiny):
    """smolagents' ToolCallingAgent (examples/agents/search_smolagent.py) on the untrained tiny
    model: every call it makes is recorded with the ids and log-probs the engine samples again
    for that prompt, seed and request id. The model writes no valid call, so smolagents uses its
    steps and then asks for a final answer: 4 calls, reward 0."""
    _, tok = tiny
    program = load_agent(f"{SMOLAGENT}:play")
    out = program(gateway.base_url, "smol", {"id": "1-hop/31", "env": "Search-v0"})
    assert out["reward"] == 0.0 and out["success"] is False
    calls = gateway.sessions.get("smol").calls
    assert len(calls) == len(out["state_keys"]) == 4  # 3 steps, then smolagents' final answer
    assert calls[0].request["tool_choice"] == "required"  # smolagents' own request, unchanged
    assert "Observation:" in calls[0].request["stop"]
    for rec in calls:
        assert rec.response_ids and len(rec.logprobs) == len(rec.response_ids)
        assert_engine_sampled(gateway, rec, tok)


def test_a_smolagents_program_plays_search_v0_through_its_tools(tiny):
    """The same program with its calls forced (the tiny model samples noise): smolagents runs
    Search-v0's search and answer, the steps carry the engine's ids and the env's state keys, and
    smolagents' text replay of the first call is a history rewrite the gateway counts."""
    model, tok = tiny
    backend = Forced(HFBackend(model, tok.pad_token_id), tok)
    texts = [
        '<tool_call>\n{"name": "search", "arguments": {"query": "friend of N"}}\n</tool_call>',
        '<tool_call>\n{"name": "answer", "arguments": {"text": "Q"}}\n</tool_call>',
    ]
    backend.texts = list(texts)
    pool = make_pool([EnvSpec("Agent-v0", {"env": "Search-v0", "agent": f"{SMOLAGENT}:play"})],
                     num_workers=0)  # fmt: skip
    runner = AgentRunner(pool, backend, tok, RunnerSettings(max_steps=5, max_new_tokens=128),
                         syntax="hermes")  # fmt: skip
    stats = RolloutStats()
    try:
        (ep,) = runner.play([ResetSpec(0, None, {"task_id": "1-hop/31"})], temperature=1.0,
                            seed=0, stats=stats)  # fmt: skip
    finally:
        runner.gateway.close()
        pool.close()
    assert ep.fault is None and ep.category == "synthetic/1-hop"
    # the env ended the episode on answer: smolagents was stopped, no third call
    assert backend.texts == [] and len(ep.steps) == 2
    assert [s.action for s in ep.steps] == [
        'search({"query": "friend of N"})',
        'answer({"text": "Q"})',
    ]
    assert ep.steps[0].state_key == "1-hop/31|" and ep.steps[1].state_key != ep.steps[0].state_key
    for s, text in zip(ep.steps, texts):
        assert s.response_ids == [
            *tok(text, add_special_tokens=False)["input_ids"],
            tok.eos_token_id,
        ]
        assert len(s.logprobs) == len(s.response_ids)
    # smolagents replays the call as "Calling tools: ..." text: the second call trains on its
    # own prompt, which holds the search's result, and counts a prefix break
    second = tok.decode(ep.steps[1].prompt_ids)
    assert "Calling tools:" in second and "Doc 1(Title: N)" in second
    assert ep.steps[1].extras["prefix_break"] and stats.counters["gateway/prefix_breaks"] == 1


def test_a_smolagents_program_trains_two_iterations(tmp_path):
    """env=agent_search with the smolagents program on the tiny model: 2 iterations of 2 groups of
    2; every episode is smolagents' 4 calls (the model writes no valid call), all of them trained."""
    summary, iters = _train_rows(tmp_path, [
        "env=agent_search", "trainer=smoke", f"env.kwargs.agent={SMOLAGENT}:play",
        "rollout.tasks_per_iter=2", "rollout.group_size=2", "rollout.max_new_tokens=16",
        "trainer.eval_initial=false", "env.eval_episodes=2", "credit=grpo",
        "trainer.checkpoint_every=0",
    ])  # fmt: skip
    assert len(iters) == 2
    for r in iters:
        assert r["train/agent_steps"] == 16 and r["loss/sequences_processed"] == 16
        assert not any(k.startswith("env/errors/") and v for k, v in r.items())
    assert summary.eval_episodes == 2 and summary.env == "Agent-v0"


class Versioned:
    """An engine view that stamps the weights' version, as the asynchronous producer's does."""

    def __init__(self, inner, version: int):
        self.inner, self.version = inner, version

    def generate(self, prompts, sampling, allowed=None):
        gens = self.inner.generate(prompts, sampling, allowed)
        for g in gens:
            g.extra["policy_version"] = self.version
        return gens


def test_a_copy_of_the_runner_serves_the_engine_view_it_is_given(tiny, tasks_file):
    """The asynchronous producer plays through ``copy.copy(runner)`` with a versioned engine:
    the copy's gateway samples through that view and its steps carry the version."""
    model, tok = tiny
    kwargs = {"tasks": str(tasks_file), "agent": f"{AGENT}:shaped"}
    pool = make_pool([EnvSpec("Agent-v0", kwargs)], num_workers=0)
    runner = AgentRunner(pool, HFBackend(model, tok.pad_token_id), tok,
                         RunnerSettings(max_steps=4, max_new_tokens=4), syntax="hermes")  # fmt: skip
    producer = copy.copy(runner)
    producer.backend = Versioned(runner.backend, 7)
    try:
        (ep,) = producer.play([ResetSpec(0, None, {"task_id": "t0"})], temperature=1.0, seed=1)
        (mine,) = runner.play([ResetSpec(0, None, {"task_id": "t0"})], temperature=1.0, seed=1)
    finally:
        producer.gateway.close()
        runner.gateway.close()
        pool.close()
    assert producer.gateway is not runner.gateway
    assert [s.policy_version for s in ep.steps] == [7, 7]
    assert [s.policy_version for s in mine.steps] == [0, 0]
    # same seed, same engine weights: the same samples through either gateway
    assert [s.response_ids for s in ep.steps] == [s.response_ids for s in mine.steps]
