"""One tool-call grammar: the in-process parser against vLLM's own ``hermes`` and ``llama3_json``
parsers (the served path of ``agent=endpoint agent.native_tools=true``) on the seeded corpus of
``scripts/tool_call_corpus.py``, and the endpoint's reading of a reply without tool calls."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentrl.evaluation.endpoint import read_native
from agentrl.rollout.tools import ToolCallFormat

pytest.importorskip("vllm.tool_parsers.hermes_tool_parser")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "tool_call_corpus.py"


def _script():
    spec = importlib.util.spec_from_file_location("tool_call_corpus_script", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def corpus():
    return _script()


@pytest.fixture(scope="module")
def result(corpus):
    return corpus.run(n=1200, seed=7)


def test_the_corpus_is_seeded_and_covers_every_kind(corpus):
    for syntax in corpus.SYNTAXES:
        a, b = corpus.generate(300, 5, syntax), corpus.generate(300, 5, syntax)
        assert [s.text for s in a] == [s.text for s in b]
        assert {s.kind for s in corpus.generate(1200, 7, syntax)} == set(corpus.KINDS)


def test_both_paths_agree_wherever_the_server_lets_the_client_decide(result, corpus):
    assert result["outputs"] == 2400
    assert result["decidable_agree"] == result["decidable_outputs"], [
        d for d in result["disagreements"] if d["kind"] not in corpus.HIDDEN["hermes"]
    ][:5]
    # where the server's parser drops what the in-process rules judge, the served path accepts
    # a call the in-process one refuses, never the other way round: a call the trainer accepts
    # is the same action served
    for d in result["disagreements"]:
        assert d["in_process"] is None and d["served"] is not None, d
    rows = {(r["syntax"], r["kind"]): r for r in result["kinds"]}
    for (syntax, kind), r in rows.items():
        if kind in corpus.HIDDEN[syntax]:
            assert r["in_process_accepts"] == 0, r


@pytest.mark.parametrize(
    "syntax, kind, accepted",
    [
        # the three classes decided once: the same answer in process and served
        ("hermes", "string_args", False),
        ("llama3_json", "string_args", False),
        ("hermes", "other_key", False),  # "parameters" in Hermes syntax
        ("llama3_json", "other_key", True),  # "arguments" in Llama's: vLLM takes both keys
        ("hermes", "no_args", False),
        ("llama3_json", "no_args", False),
        ("hermes", "tag_in_string", True),
        ("llama3_json", "tag_in_string", True),
        ("hermes", "close_in_string", False),  # a call ends at its first </tool_call>
        ("hermes", "valid", True),
        ("llama3_json", "valid", True),
    ],
)
def test_each_decided_class_gets_one_answer(result, syntax, kind, accepted):
    row = next(r for r in result["kinds"] if (r["syntax"], r["kind"]) == (syntax, kind))
    want = row["outputs"] if accepted else 0
    assert row["agree"] == row["outputs"] > 0
    assert row["in_process_accepts"] == row["served_accepts"] == want


def test_a_reply_without_tool_calls_blames_the_server_only_for_a_well_formed_call(corpus):
    fmt = ToolCallFormat(syntax="hermes").bind(corpus.TOOLS)
    good = '<tool_call>{"name": "look", "arguments": {}}</tool_call>'
    reason = read_native(fmt, good, []).reason
    assert "server returned no tool_calls" in reason and "--tool-call-parser hermes" in reason
    # vLLM's hermes parser finds no call under "parameters" or without "arguments": the reason
    # is the in-process one, not the server's flags
    for text, why in [
        ('<tool_call>{"name": "look", "parameters": {}}</tool_call>', '"parameters"'),
        ('<tool_call>{"name": "look"}</tool_call>', 'has no "arguments"'),
    ]:
        reason = read_native(fmt, text, []).reason
        assert why in reason and "tool-call-parser" not in reason, reason
        assert reason == fmt.parse(text).reason
    # arguments the model wrote as a JSON-encoded string reach the client double-encoded
    reason = read_native(fmt, "", [("look", '"{}"')]).reason
    assert reason == fmt.parse('<tool_call>{"name": "look", "arguments": "{}"}</tool_call>').reason


def test_the_endpoint_reads_a_native_reply_through_the_same_function(corpus):
    fmt = ToolCallFormat(syntax="llama3_json").bind(corpus.TOOLS)
    message = SimpleNamespace(
        content=None,
        tool_calls=[
            SimpleNamespace(
                id="c1", function=SimpleNamespace(name="move", arguments='{"direction": "up"}')
            )
        ],
    )
    ep = SimpleNamespace(memory=[])
    action = corpus.EndpointAgent._read_call(None, ep, fmt, message)
    assert (action.text, action.parsed) == ("up", True)
    assert action.response == '{"name": "move", "parameters": {"direction": "up"}}'  # its syntax
