"""The tool-call action format: parsing in the template's syntax, prompts rendered with tools by
real chat templates (fixtures), token-in/token-out under a template that rewrites history, and
constrained decoding of calls on the embedded model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agentrl.envs.sokoban.env import TOOLS as SOKOBAN_TOOLS
from agentrl.envs.tools import action_to_call, call_to_action, tool, tool_info, tools_problem
from transformers import AutoTokenizer

from agentrl import envs
from agentrl.backends.base import SamplingParams
from agentrl.backends.hf import HFBackend
from agentrl.models.tiny import CHAT_TEMPLATE
from agentrl.rollout import (
    ActionFormat,
    PromptBuilder,
    PromptConfig,
    ResetSpec,
    Turn,
    run_episodes,
    to_step_batch,
)
from agentrl.rollout.tools import ToolCallFormat, detect_syntax, render_call

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates"
SEARCH = tool_info(
    [
        tool("search", "Search the corpus.", query="the query"),
        tool("answer", "Give the answer.", text="the answer"),
        tool("move", "Move.", direction={"type": "string", "enum": ["up", "down"]}),
    ],
    {"search": "search[{query}]", "answer": "answer[{text}]", "move": "{direction}"},
)
HERMES = ToolCallFormat(syntax="hermes").bind(SEARCH)
LLAMA = ToolCallFormat(syntax="llama3_json").bind(SEARCH)


def call(name: str, args: dict, wrap: bool = True) -> str:
    body = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>" if wrap else body


# -- parsing ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "response, action",
    [
        (call("search", {"query": "Alice Smith"}), "search[Alice Smith]"),
        (call("answer", {"text": "Zoë 東京 🙂"}), "answer[Zoë 東京 🙂]"),  # unicode kept as is
        ('<tool_call>{"name":"move","arguments":{"direction":"up"}}</tool_call>', "up"),
        (
            '  <tool_call>\n{"name": "move", "arguments": {"direction": "down"}}\n</tool_call>\n',
            "down",
        ),
        # a literal <tool_call> inside an argument string is text (vLLM's hermes parser agrees)
        (call("answer", {"text": "write <tool_call> tags"}), "answer[write <tool_call> tags]"),
    ],
)
def test_hermes_calls_become_the_env_commands(response, action):
    assert HERMES.parse(response) == (action, "") or HERMES.parse(response).action == action


@pytest.mark.parametrize(
    "response, reason",
    [
        ("", "empty response"),
        ("   \n", "empty response"),
        ("I will search for Alice.", "no <tool_call> block"),
        (
            '<tool_call>{"name": "search", "arguments": {"query": "A"}</tool_call>',
            "bad JSON in the tool call: Expecting ',' delimiter",
        ),
        (
            "<tool_call>search(query='A')</tool_call>",
            "bad JSON in the tool call: Expecting value at character 0",
        ),
        ('<tool_call>["search", "A"]</tool_call>', "the tool call must be a JSON object, got list"),
        (call("find", {"query": "A"}), "unknown tool 'find' (tools: search, answer, move)"),
        (call("search", {}), "search misses argument(s) query"),
        (call("search", {"query": "A", "k": 3}), "search takes no argument(s) k"),
        (call("search", {"query": 3}), "search: argument query must be a string, got 3"),
        (
            call("move", {"direction": "north"}),
            'move: argument direction must be one of "up", "down", got "north"',
        ),
        ('<tool_call>{"arguments": {"query": "A"}}</tool_call>', "the tool call has no name"),
        (
            '<tool_call>{"name": "search", "arguments": {"query": "A"}, "id": 1}</tool_call>',
            "the tool call has unexpected key(s) id",
        ),
        (
            call("search", {"query": "A"}) + call("answer", {"text": "B"}),
            "2 tool calls; one is allowed per turn",
        ),
        (
            "Let me search. " + call("search", {"query": "A"}),
            "text around the tool call: 'Let me search.'",
        ),
        (call("search", {"query": "A"}) + " done", "text around the tool call: 'done'"),
        (
            "<tool_call><tool_call>"
            + call("search", {"query": "A"}, wrap=False)
            + "</tool_call></tool_call>",
            "nested <tool_call> tags",
        ),
        ('<tool_call>{"name": "search", "arguments": {"query": "A"}}', "unclosed <tool_call>"),
        (
            '{"name": "search", "arguments": {"query": "A"}}</tool_call>',
            "</tool_call> without <tool_call>",
        ),
        (
            '<tool_call>{"name": "search", "arguments": {"query": "A"}} {}</tool_call>',
            "text after the JSON object inside <tool_call>",
        ),
        (
            "<think>hmm</think>" + call("search", {"query": "A"}),
            "text around the tool call: '<think>hmm</think>'",
        ),
        (call("search", {"query": " "}), "search: argument query is empty"),
        (
            '<tool_call>{"name": "move", "arguments": "{\\"direction\\": \\"down\\"}"}</tool_call>',
            'the tool call\'s "arguments" is a JSON-encoded string',
        ),
        (
            '<tool_call>{"name": "move", "parameters": {"direction": "up"}}</tool_call>',
            'the tool call names its arguments "parameters"',
        ),
        ('<tool_call>{"name": "move"}</tool_call>', 'the tool call has no "arguments"'),
        (call("answer", {"text": "a </tool_call> b"}), "</tool_call> inside the tool call"),
        (call("search", {"query": "x" * 600}), "action too long"),
    ],
)
def test_malformed_hermes_output_is_an_invalid_action_that_says_why(response, reason):
    parsed = HERMES.parse(response)
    assert parsed.action is None
    assert parsed.reason.startswith(reason), parsed.reason


def test_output_cut_at_the_token_limit_says_so():
    cut = '<tool_call>{"name": "search", "argu'
    assert HERMES.parse(cut, "length").reason == "the tool call was cut at the token limit"
    assert HERMES.parse("I think", "length").reason == "no <tool_call> before the token limit"
    assert LLAMA.parse('{"name": "search", "param', "length").reason == (
        "the tool call was cut at the token limit"
    )


def test_huge_and_deeply_nested_output_never_raises():
    big = "x" * 100_000
    assert HERMES.parse(big).reason == "no <tool_call> block"
    around = big + call("search", {"query": "A"})
    assert HERMES.parse(around).reason.startswith("text around the tool call: 'xxxx")
    deep = "<tool_call>" + "[" * 100_000 + "</tool_call>"
    assert HERMES.parse(deep).action is None  # a JSON error or too deep: a reason, no raise
    assert LLAMA.parse('{"a": ' + "[" * 100_000).action is None
    long_arg = call("answer", {"text": "y" * 100_000})
    assert HERMES.parse(long_arg).reason == "action too long"


def test_think_blocks_before_the_call_when_allowed():
    fmt = ToolCallFormat(think=True, require_think=True).bind(SEARCH)
    assert fmt.parse("<think>who is A?</think>\n" + call("search", {"query": "A"})).action == (
        "search[A]"
    )
    assert fmt.parse(call("search", {"query": "A"})).reason == "missing <think> block"


@pytest.mark.parametrize(
    "response, action, reason",
    [
        ('{"name": "search", "parameters": {"query": "Ünïcode"}}', "search[Ünïcode]", ""),
        ('<|python_tag|>{"name": "move", "parameters": {"direction": "up"}}', "up", ""),
        ('{"name": "answer", "arguments": {"text": "B"}}', "answer[B]", ""),  # OpenAI's key too
        (
            '{"name": "answer", "arguments": {"text": "B"}, "parameters": {"text": "C"}}',
            None,
            'the tool call has both "parameters" and "arguments"',
        ),
        ('{"name": "answer"}', None, 'the tool call has no "parameters"'),
        ('{"name": "answer", "parameters": "{\\"text\\": \\"B\\"}"}', None, "the tool call's"),
        ("The answer is B.", None, "no tool call (a JSON object)"),
        (
            'Sure! {"name": "answer", "parameters": {"text": "B"}}',
            None,
            "text around the tool call: 'Sure!'",
        ),
        (
            '{"name": "answer", "parameters": {"text": "B"}} Done.',
            None,
            "text around the tool call: 'Done.'",
        ),
        (
            '{"name": "answer", "parameters": {"text": "B"}}; {"name": "answer", "parameters": {"text": "C"}}',
            None,
            "several tool calls; one is allowed per turn",
        ),
        ('{"name": "answer", "parameters": {"text": "B"}', None, "bad JSON in the tool call"),
        ('{"name": "answer", "parameters": {"txt": "B"}}', None, "answer misses argument(s) text"),
        ('{"name": "look", "parameters": {}}', None, "unknown tool 'look'"),
    ],
)
def test_llama3_json_calls(response, action, reason):
    parsed = LLAMA.parse(response)
    assert parsed.action == action
    assert parsed.reason.startswith(reason), parsed.reason


def test_an_unbound_format_or_a_non_string_is_invalid_not_an_error():
    assert ToolCallFormat().parse(call("search", {"query": "A"})).reason == (
        "the env declares no tools (info['tools'])"
    )
    assert HERMES.parse(None).reason == "empty response"  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tool syntax must be one of hermes, llama3_json"):
        ToolCallFormat(syntax="xml")


def test_the_invalid_reason_is_shown_after_the_next_observation():
    memory = HERMES.remember(None, "no call here")
    assert HERMES.prompt_note(memory) == "\nYour last tool call was invalid: no <tool_call> block."
    assert HERMES.prompt_note(HERMES.remember(memory, call("search", {"query": "A"}))) == ""


# -- calls <-> env actions ---------------------------------------------------------------------------
def test_calls_map_to_commands_and_back():
    tools, acts = SEARCH["tools"], SEARCH["tool_actions"]
    assert call_to_action("search", {"query": "a b"}, acts) == "search[a b]"
    assert action_to_call("search[a b]", tools, acts) == ("search", {"query": "a b"})
    assert action_to_call("down", tools, acts) == ("move", {"direction": "down"})
    assert action_to_call("left", tools, acts) is None  # not in the enum: no call writes it
    # A tool without a template: the action is the call's JSON (keys sorted), and back.
    plain = [tool("jump", "Jump.", height={"type": "integer"})]
    text = call_to_action("jump", {"height": 2}, None)
    assert text == '{"arguments": {"height": 2}, "name": "jump"}'
    assert action_to_call(text, plain, None) == ("jump", {"height": 2})
    assert HERMES.renders("search[B]") == [
        '<tool_call>\n{"name": "search", "arguments": {"query": "B"}}\n</tool_call>'
    ]
    assert LLAMA.renders("up") == ['{"name": "move", "parameters": {"direction": "up"}}']
    assert HERMES.renders("left") == []


@pytest.mark.parametrize(
    "tools, actions, problem",
    [
        ([], None, "info['tools'] must be a non-empty list"),
        ([{"name": "x"}], None, "tool 0 is not"),
        ([tool("a b", "bad name")], None, "tool 0 has no valid name"),
        ([tool("a", "x"), tool("a", "y")], None, "tool 'a' is declared twice"),
        ([tool("a", "x", q={"type": "list"})], None, "tool 'a': argument 'q' needs a type"),
        ([tool("a", "x", q="d")], {"a": "go {where}"}, "tool_actions['a'] = 'go {where}'"),
        ([tool("a", "x", q="d")], {"b": "go {q}"}, "tool_actions names undeclared tools: b"),
    ],
)
def test_bad_declarations_are_named(tools, actions, problem):
    assert tools_problem(tools, actions).startswith(problem)


@pytest.mark.parametrize(
    "env_id, names",
    [
        ("Sokoban-v0", ["move"]),
        ("FrozenLake-v0", ["move"]),
        ("WebShop-v0", ["search", "click"]),
        ("Search-v0", ["search", "answer"]),
    ],
)
def test_builtin_envs_declare_their_commands_as_tools(env_id, names):
    env = envs.make(env_id)
    _obs, info = env.reset(seed=0)
    assert [t["function"]["name"] for t in info["tools"]] == names
    fmt = ToolCallFormat().bind(info)
    for a in info["admissible_actions"]:  # each admissible command, written as a call, parses back
        (text,) = fmt.renders(a)
        assert fmt.parse(text).action == a
    expert = env.expert_action()
    assert fmt.parse(fmt.render(expert)).action == expert


# -- prompts with tools through real chat templates -----------------------------------------------
@pytest.fixture
def tok_with(tiny_path):
    """The tiny tokenizer (byte-level: any text encodes) with a fixture's chat template."""

    def make(name: str):
        tok = AutoTokenizer.from_pretrained(tiny_path)
        if name != "tiny":
            tok.chat_template = (FIXTURES / f"{name}.jinja").read_text()
        return tok

    return make


SMALL = tool_info([tool("move", "Move.", direction={"type": "string", "enum": ["up", "down"]})])
MOVE = json.dumps(SMALL["tools"][0], ensure_ascii=False)


def _builder(tok, **kw):
    cfg = {"instruction": True, "history": -1, "admissible_actions": False}
    cfg.update(observation_prefix="", history_prefix="", response_hint="Call one tool.", **kw)
    return PromptBuilder(tok, PromptConfig(**cfg))


def test_qwen25_renders_the_tools_and_tool_messages(tok_with):
    tok = tok_with("qwen2.5")
    history = [Turn("grid 0", call("move", {"direction": "up"}))]
    b = _builder(tok)
    msgs = b.messages("Push the box.", history, "grid 1", None, role="tool")
    text = tok.apply_chat_template(
        msgs, tools=SMALL["tools"], add_generation_prompt=True, tokenize=False
    )
    expected = (
        "<|im_start|>system\nPush the box.\nCall one tool.\n\n# Tools\n\nYou may call one or more "
        "functions to assist with the user query.\n\nYou are provided with function signatures "
        f"within <tools></tools> XML tags:\n<tools>\n{MOVE}\n</tools>\n\nFor each function call, "
        "return a json object with function name and arguments within <tool_call></tool_call> XML "
        'tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\ngrid 0<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "move", "arguments": {"direction": "up"}}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\ngrid 1\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert text == expected
    ids = b.build("Push the box.", history, "grid 1", None, tools=SMALL["tools"], role="tool")
    assert tok.decode(ids) == expected  # the ids are the rendered text, nothing added
    assert detect_syntax(tok.chat_template) == "hermes"


def test_llama31_renders_the_tools_in_the_first_user_message(tok_with):
    tok = tok_with("llama3.1")
    history = [Turn("grid 0", '{"name": "move", "parameters": {"direction": "up"}}')]
    msgs = _builder(tok).messages("Push the box.", history, "grid 1", None, role="tool")
    text = tok.apply_chat_template(
        msgs, tools=SMALL["tools"], add_generation_prompt=True, tokenize=False
    )
    tools_json = json.dumps(SMALL["tools"][0], indent=4)
    expected = (
        "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
        "Push the box.\nCall one tool.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please "
        "respond with a JSON for a function call with its proper arguments that best answers the "
        'given prompt.\n\nRespond in the format {"name": function name, "parameters": dictionary '
        "of argument name and its value}.Do not use variables.\n\n"
        f"{tools_json}\n\ngrid 0<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
        '{"name": "move", "parameters": {"direction": "up"}}<|eot_id|>'
        # Llama 3.1 writes a string tool result through tojson (a string is iterable in Jinja)
        '<|start_header_id|>ipython<|end_header_id|>\n\n"grid 1"<|eot_id|>'
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert text == expected
    assert detect_syntax(tok.chat_template) == "llama3_json"


def test_the_tiny_template_is_tool_aware_and_unchanged_without_tools(tok_with):
    tok = tok_with("tiny")
    before = (  # the template before it learned tools: the default run's prompts are unchanged
        "{% for message in messages %}"
        "{{ '<|' + message['role'] + '|>' }}{{ message['content'] }}{{ '<|end|>' }}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
    )
    msgs = [
        {"role": "system", "content": "Push."},
        {"role": "user", "content": "grid"},
        {"role": "assistant", "content": "<action>up</action>"},
        {"role": "user", "content": "grid 2"},
    ]
    old = AutoTokenizer.from_pretrained(tok.name_or_path)
    old.chat_template = before
    assert tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False) == (
        old.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    )
    msgs[2] = {"role": "assistant", "content": call("move", {"direction": "up"})}
    msgs[3] = {"role": "tool", "content": "grid 2"}
    text = tok.apply_chat_template(
        msgs, tools=SMALL["tools"], add_generation_prompt=True, tokenize=False
    )
    assert text == (
        f"<|system|>Push.\nTools:\n{MOVE}\nCall one as <tool_call>\n"
        '{"name": NAME, "arguments": ARGS}\n</tool_call><|end|>'
        "<|user|>grid<|end|>"
        f"<|assistant|>{call('move', {'direction': 'up'})}<|end|>"
        "<|user|><tool_response>grid 2</tool_response><|end|><|assistant|>"
    )
    assert tok.chat_template == CHAT_TEMPLATE and detect_syntax(CHAT_TEMPLATE) == "hermes"


# -- token-in/token-out ------------------------------------------------------------------------------
class Recording:
    """The real HF backend, keeping every prompt it got and every response it returned."""

    def __init__(self, inner):
        self.inner, self.sent = inner, []

    def generate(self, prompts, sampling, allowed=None):
        gens = self.inner.generate(prompts, sampling, allowed)
        self.sent += [(list(p), list(g.token_ids)) for p, g in zip(prompts, gens)]
        return gens

    def update_weights(self, sd):
        pass

    def close(self):
        pass


def _play(tok, model, pool, context):
    """Sokoban, 3 steps, responses forced (constrained) to ``<think>ok</think><action>A</action>``
    under Qwen3's template, which drops the think blocks of turns before the last user message."""
    fmt = ActionFormat(template="<think>ok</think><action>{action}</action>", think=True)
    builder = _builder(tok, context=context, max_prompt_tokens=100_000)
    backend = Recording(HFBackend(model, tok.pad_token_id))
    eps = run_episodes(
        pool, backend, builder, fmt, [ResetSpec(0, seed=3)] * 2,
        SamplingParams(max_new_tokens=16, seed=0), max_steps=3, constrained=True,
    )  # fmt: skip
    return eps, backend.sent


def test_tokens_context_keeps_the_sampled_ids_under_a_template_that_rewrites_history(
    tiny, tok_with, sokoban_pool
):
    model, _ = tiny
    tok = tok_with("qwen3")
    eps, sent = _play(tok, model, sokoban_pool, "tokens")
    _batch, seqs = to_step_batch(eps)
    steps = [s for e in eps for s in e.steps]
    assert len(steps) >= 4 and all(len(e.steps) >= 2 for e in eps)
    # What the learner trains on is exactly what the engine was given and produced...
    assert sorted((s.prompt_ids, s.response_ids) for s in seqs) == sorted(sent)
    for e in eps:
        for prev, cur in zip(e.steps, e.steps[1:]):
            # ...and each later context holds the earlier steps' exact ids, think block included.
            head = prev.prompt_ids + prev.response_ids
            assert cur.prompt_ids[: len(head)] == head
            assert "<think>ok</think>" in tok.decode(prev.response_ids)
            tail = tok.decode(cur.prompt_ids[len(head) :])
            # the tiny model stops at its own <|end|>: the template's end of turn follows it
            assert tail.startswith("<|im_end|>\n<|im_start|>user\n")
            assert tail.endswith("<|im_start|>assistant\n")
    # Rendered afresh instead, Qwen3 drops the past think blocks: the context is not the samples.
    eps, _ = _play(tok, model, sokoban_pool, "render")
    for e in eps:
        prev, cur = e.steps[0], e.steps[1]
        assert cur.prompt_ids[: len(prev.prompt_ids) + len(prev.response_ids)] != (
            prev.prompt_ids + prev.response_ids
        )
        assert "<think>ok</think>" not in tok.decode(cur.prompt_ids)


# -- the embedded model in the tool format -----------------------------------------------------------
def test_constrained_decoding_writes_admissible_calls_on_the_tiny_model(tiny, sokoban_pool):
    model, tok = tiny
    fmt = ToolCallFormat(syntax=detect_syntax(tok.chat_template))
    builder = _builder(tok, history=0, context="tokens")
    eps = run_episodes(
        sokoban_pool, HFBackend(model, tok.pad_token_id), builder, fmt,
        [ResetSpec(0, seed=1)] * 4, SamplingParams(max_new_tokens=64, seed=0), max_steps=3,
        constrained=True,
    )  # fmt: skip
    steps = [s for e in eps for s in e.steps]
    assert steps and all(s.valid and s.action in ("up", "down", "left", "right") for s in steps)
    for s in steps:
        assert s.response == render_call("hermes", "move", {"direction": s.action})
        assert fmt.bind(SOKOBAN_TOOLS).parse(s.response).action == s.action
    first = tok.decode(eps[0].steps[0].prompt_ids)
    assert first.startswith("<|system|>") and '"name": "move"' in first  # tools in the prompt
    if len(eps[0].steps) > 1:
        later = tok.decode(eps[0].steps[1].prompt_ids)
        assert "<tool_response>" in later  # the observation went back as a tool message


def test_free_generation_reports_invalid_calls_in_the_next_prompt(tiny, sokoban_pool):
    model, tok = tiny
    builder = _builder(tok, history=0)
    eps = run_episodes(
        sokoban_pool, HFBackend(model, tok.pad_token_id), builder, ToolCallFormat(),
        [ResetSpec(0, seed=1)] * 2, SamplingParams(max_new_tokens=4, seed=0), max_steps=2,
    )  # fmt: skip
    for e in eps:  # an untrained model writes no call in 4 tokens: invalid, and told so
        assert all(not s.valid and s.parse_error for s in e.steps)
        assert "Your last tool call was invalid:" in tok.decode(e.steps[1].prompt_ids)
