"""Do the in-process tool-call parser and the served path agree? A seeded corpus, both paths.

    python scripts/tool_call_corpus.py                 # 2,200 outputs per syntax, seed 0
    python scripts/tool_call_corpus.py --n 5000 --seed 3 --out runs/corpus.json

The corpus is generated here (seeded): well-formed calls of five tools (string, enum, integer
and no arguments; unicode, quotes, escapes and markup inside strings; key order, whitespace
and JSON spacing varied) and every kind of malformed output a model writes (text around the
call, several calls, unclosed or nested tags, bad JSON, arguments as a JSON-encoded string or
under the other syntax's key, no arguments key, a literal ``<tool_call>`` inside a string,
extra keys, unknown tools, wrong types, ...), each output labelled with its kind.

Each output is judged twice:

- **in process**: :meth:`agentrl.rollout.tools.ToolCallFormat.parse` (training, ``agent=model``);
- **served**: vLLM's own parser (``hermes`` or ``llama3_json``, the non-streaming path a
  chat-completions server runs with ``--enable-auto-tool-choice --tool-call-parser``) splits the
  output into ``content`` and ``tool_calls``; the endpoint agent
  (``agent=endpoint agent.native_tools=true``) then reads that reply as it reads a server's.

Two judgements agree when both give the same env action or both refuse. Prints one row per kind
(outputs, agreement, how many each path accepts) and the totals; ``--out`` writes them as JSON.
The kinds where the served path cannot agree (the server's parser drops what the in-process
rules judge) are :data:`HIDDEN`; docs/envs/contract.md names them.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from agentrl.envs.tools import tool, tool_info

from agentrl.evaluation.endpoint import EndpointAgent
from agentrl.rollout.tools import ToolCallFormat

SYNTAXES = ("hermes", "llama3_json")

TOOLS = tool_info(
    [
        tool("search", "Search the corpus.", query="the query"),
        tool("answer", "Give the answer.", text="the answer"),
        tool(
            "move",
            "Move one cell.",
            direction={"type": "string", "enum": ["up", "down", "left", "right"]},
        ),
        tool("look", "Look around."),
        tool("buy", "Buy an item.", item="the item", count={"type": "integer"}),
    ],
    {
        "search": "search[{query}]",
        "answer": "answer[{text}]",
        "move": "{direction}",
        "look": "look",
        "buy": "buy {count} {item}",
    },
)

#: Kinds whose served judgement cannot follow the in-process rules: vLLM's parser drops what
#: those rules judge (``llama3_json`` returns no text at all beside its calls), so the endpoint
#: sees a clean call where the in-process parser sees a malformed one.
HIDDEN = {
    "hermes": {"text_after", "unclosed", "extra_key", "both_keys"},
    "llama3_json": {
        "text_before",
        "text_after",
        "think_before",
        "list_wrapped",
        "extra_key",
        "both_keys",
    },
}

_WORDS = [
    "Alice", "Bob", "capital", "of", "France", "Zoë", "東京", "🙂", "naïve", "the", "a", "river",
    "who", "wrote", "Hamlet", "1984", "e=mc^2", "x<y", "a&b", "50%", "#tag", "C:\\path",
    'say "hi"', "it's", "{braces}", "[brackets]", "semi;colon", "tab\there", "new\nline",
    "<b>bold</b>", "back\\slash", "ünïcödé", "Ελληνικά", "русский", "   padded  ",
]  # fmt: skip
_ARGS_KEY = {"hermes": "arguments", "llama3_json": "parameters"}


@dataclass
class Sample:
    kind: str
    text: str


def _words(rng: random.Random, lo: int = 1, hi: int = 4) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(lo, hi))).strip() or "x"


def _args(rng: random.Random, name: str) -> dict[str, Any]:
    if name == "search":
        return {"query": _words(rng)}
    if name == "answer":
        return {"text": _words(rng)}
    if name == "move":
        return {"direction": rng.choice(["up", "down", "left", "right"])}
    if name == "buy":
        return {"item": _words(rng, 1, 2), "count": rng.randint(1, 9)}
    return {}


def _dumps(rng: random.Random, obj: Any) -> str:
    """JSON as models write it: spacing, indentation and escaping varied."""
    style = rng.randrange(4)
    if style == 0:
        return json.dumps(obj, ensure_ascii=False)
    if style == 1:
        return json.dumps(obj, ensure_ascii=True)
    if style == 2:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return json.dumps(obj, ensure_ascii=False, indent=rng.choice([1, 2]))


def _obj(rng: random.Random, name: Any, args: Any, key: str) -> dict[str, Any]:
    pairs = [("name", name), (key, args)]
    if rng.random() < 0.2:
        pairs.reverse()
    return dict(pairs)


def _ws(rng: random.Random) -> str:
    return rng.choice(["", "", "\n", " ", "\n\n", "  \n"])


def _wrap(rng: random.Random, syntax: str, body: str) -> str:
    if syntax == "hermes":
        return f"<tool_call>{_ws(rng)}{body}{_ws(rng)}</tool_call>"
    return ("<|python_tag|>" if rng.random() < 0.2 else "") + body


def _call(rng: random.Random, syntax: str, name: str | None = None, **over: Any) -> str:
    name = name or rng.choice(["search", "answer", "move", "look", "buy"])
    args = over.pop("args", None)
    args = _args(rng, name) if args is None else args
    return _wrap(rng, syntax, _dumps(rng, _obj(rng, name, args, _ARGS_KEY[syntax])))


def _kind(rng: random.Random, syntax: str, kind: str) -> str:  # noqa: C901, PLR0911, PLR0912
    key = _ARGS_KEY[syntax]
    other = "parameters" if key == "arguments" else "arguments"
    name = rng.choice(["search", "answer", "move", "buy"])
    args = _args(rng, name)
    if kind == "valid":
        return _ws(rng) + _call(rng, syntax) + _ws(rng)
    if kind == "other_key":  # hermes: "parameters"; llama3_json: "arguments" (both are Llama's)
        return _wrap(rng, syntax, _dumps(rng, {"name": name, other: args}))
    if kind == "string_args":
        return _wrap(rng, syntax, _dumps(rng, {"name": name, key: json.dumps(args)}))
    if kind == "no_args":
        return _wrap(rng, syntax, _dumps(rng, {"name": rng.choice([name, "look"])}))
    if kind == "both_keys":
        return _wrap(
            rng, syntax, _dumps(rng, {"name": name, "arguments": args, "parameters": args})
        )
    if kind == "null_args":
        return _wrap(rng, syntax, _dumps(rng, {"name": name, key: None}))
    if kind == "tag_in_string":
        text = _words(rng, 0, 2) + " <tool_call> " + _words(rng, 0, 2)
        return _call(rng, syntax, "answer", args={"text": text.strip()})
    if kind == "close_in_string":
        text = _words(rng, 0, 2) + " </tool_call> " + _words(rng, 0, 2)
        return _call(rng, syntax, "answer", args={"text": text.strip()})
    if kind == "text_before":
        return (
            rng.choice(["Let me search.", "Sure!", "I'll move up.", "Thinking..."])
            + rng.choice([" ", "\n"])
            + _call(rng, syntax)
        )
    if kind == "text_after":
        return _call(rng, syntax) + rng.choice([" Done.", "\nHope this helps!", " ok", "\n."])
    if kind == "think_before":
        return f"<think>{_words(rng)}</think>{_ws(rng)}" + _call(rng, syntax)
    if kind == "several":
        sep = rng.choice(["", "\n", " ", "; "])
        return _call(rng, syntax) + sep + _call(rng, syntax)
    if kind == "unclosed":  # hermes: no </tool_call>; llama3_json: the object left open
        full = _call(rng, syntax)
        return full[: -len("</tool_call>")] if syntax == "hermes" else full[:-1]
    if kind == "nested":
        inner = _dumps(rng, _obj(rng, name, args, key))
        if syntax == "hermes":
            return f"<tool_call><tool_call>{inner}</tool_call></tool_call>"
        return _dumps(rng, {"call": json.loads(inner)})
    if kind == "bad_json":
        body = _dumps(rng, _obj(rng, name, args, key))
        broken = rng.choice(
            [
                body[: rng.randint(1, len(body) - 1)],
                body.replace('"', "'"),
                body[:-1] + ",}",
                f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})",
            ]
        )
        return _wrap(rng, syntax, broken)
    if kind == "not_object":
        return _wrap(rng, syntax, _dumps(rng, rng.choice([[name, args], name, 42, None])))
    if kind == "list_wrapped":
        return _wrap(rng, syntax, _dumps(rng, [_obj(rng, name, args, key)]))
    if kind == "extra_key":
        obj = _obj(rng, name, args, key)
        obj[rng.choice(["id", "type", "index"])] = rng.choice(["call_1", "function", 0])
        return _wrap(rng, syntax, _dumps(rng, obj))
    if kind == "no_name":
        return _wrap(rng, syntax, _dumps(rng, {key: args}))
    if kind == "name_not_string":
        return _wrap(
            rng, syntax, _dumps(rng, {"name": rng.choice([3, None, ["search"]]), key: args})
        )
    if kind == "unknown_tool":
        return _call(rng, syntax, rng.choice(["find", "Search", "open", "search_web"]), args=args)
    if kind == "wrong_type":
        bad = {"search": {"query": 3}, "answer": {"text": ["B"]}, "move": {"direction": 1},
               "buy": {"item": "pen", "count": "two"}}[name]  # fmt: skip
        return _call(rng, syntax, name, args=bad)
    if kind == "missing_arg":
        return _call(rng, syntax, name, args={})
    if kind == "extra_arg":
        return _call(rng, syntax, name, args={**args, "k": 3})
    if kind == "enum_violation":
        return _call(rng, syntax, "move", args={"direction": rng.choice(["north", "UP", "jump"])})
    if kind == "empty_arg":
        return _call(rng, syntax, "search", args={"query": rng.choice(["", " ", "\n"])})
    if kind == "no_call":
        return rng.choice(["I will search for Alice.", "up", "The answer is B.", "search[Alice]"])
    raise ValueError(f"unknown kind {kind!r}")


#: Kinds and their shares of the corpus (well-formed calls are the common case).
KINDS = {
    "valid": 30, "other_key": 4, "string_args": 4, "no_args": 4, "both_keys": 2, "null_args": 2,
    "tag_in_string": 4, "close_in_string": 3, "text_before": 4, "text_after": 4,
    "think_before": 3, "several": 4, "unclosed": 3, "nested": 2, "bad_json": 4, "not_object": 2,
    "list_wrapped": 2, "extra_key": 3, "no_name": 2, "name_not_string": 2, "unknown_tool": 3,
    "wrong_type": 3, "missing_arg": 3, "extra_arg": 3, "enum_violation": 2, "empty_arg": 2,
    "no_call": 3,
}  # fmt: skip


def generate(n: int, seed: int, syntax: str) -> list[Sample]:
    """``n`` outputs in ``syntax``, the kinds drawn by their shares (:data:`KINDS`), seeded."""
    rng = random.Random(f"{seed}:{syntax}")
    kinds = rng.choices(list(KINDS), weights=list(KINDS.values()), k=n)
    return [Sample(k, _kind(rng, syntax, k)) for k in kinds]


# -- the two judgements -----------------------------------------------------------------------
def formats() -> dict[str, ToolCallFormat]:
    return {s: ToolCallFormat(syntax=s).bind(TOOLS) for s in SYNTAXES}


def vllm_parsers(tokenizer: Any) -> dict[str, Any]:
    """vLLM's composed parser (tool parser ``hermes`` / ``llama3_json``) per syntax and the
    request they parse under (these tools, ``tool_choice=auto``), as a server builds them."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser.parser_manager import ParserManager

    request = ChatCompletionRequest(
        model="m", messages=[{"role": "user", "content": "go"}], tools=TOOLS["tools"]
    )
    out = {}
    for syntax in SYNTAXES:
        cls = ParserManager.get_parser(tool_parser_name=syntax, enable_auto_tools=True)
        out[syntax] = (cls, request)
    return {s: (cls, request, tokenizer) for s, (cls, request) in out.items()}


def served(parser: tuple[Any, Any, Any], fmt: ToolCallFormat, text: str) -> str | None:
    """The env action the endpoint agent reads from a server's reply to ``text`` (``None``:
    an invalid step). One parser per request, as the server holds one."""
    cls, request, tokenizer = parser
    _reasoning, content, calls = cls(tokenizer, request.tools).parse(
        text, request, enable_auto_tools=True
    )
    message = SimpleNamespace(
        content=content,
        tool_calls=[
            SimpleNamespace(id=c.id, function=SimpleNamespace(name=c.name, arguments=c.arguments))
            for c in calls or []
        ],
    )
    ep = SimpleNamespace(memory=[])
    action = EndpointAgent._read_call(None, ep, fmt, message)  # type: ignore[arg-type]
    return action.text if action.parsed else None


def in_process(fmt: ToolCallFormat, text: str) -> str | None:
    return fmt.parse(text).action


@dataclass
class KindRow:
    syntax: str
    kind: str
    outputs: int = 0
    agree: int = 0
    in_process_accepts: int = 0
    served_accepts: int = 0


def compare(samples: list[Sample], syntax: str, parser: Any) -> tuple[list[KindRow], list[dict]]:
    """One row per kind, and every disagreement (kind, text, both judgements)."""
    fmt = formats()[syntax]
    rows: dict[str, KindRow] = {}
    diffs = []
    for s in samples:
        a, b = in_process(fmt, s.text), served(parser, fmt, s.text)
        row = rows.setdefault(s.kind, KindRow(syntax, s.kind))
        row.outputs += 1
        row.agree += a == b
        row.in_process_accepts += a is not None
        row.served_accepts += b is not None
        if a != b:
            diffs.append({"kind": s.kind, "text": s.text, "in_process": a, "served": b})
    return sorted(rows.values(), key=lambda r: list(KINDS).index(r.kind)), diffs


def tokenizer_with_python_tag() -> Any:
    """The embedded model's tokenizer with Llama 3.1's ``<|python_tag|>`` added (vLLM's
    ``llama3_json`` parser looks it up in the vocabulary at construction)."""
    from transformers import AutoTokenizer

    from agentrl.config import TinyModelConfig
    from agentrl.models import resolve_model_path

    tok = AutoTokenizer.from_pretrained(resolve_model_path("tiny", asdict(TinyModelConfig())))
    tok.add_special_tokens({"additional_special_tokens": ["<|python_tag|>"]})
    return tok


def run(n: int, seed: int) -> dict[str, Any]:
    import logging

    logging.getLogger("vllm").setLevel(logging.CRITICAL)  # its parsers log every refusal
    parsers = vllm_parsers(tokenizer_with_python_tag())
    rows, diffs = [], []
    for syntax in SYNTAXES:
        r, d = compare(generate(n, seed, syntax), syntax, parsers[syntax])
        rows += r
        diffs += d
    total = sum(r.outputs for r in rows)
    agree = sum(r.agree for r in rows)
    hidden = [r for r in rows if r.kind in HIDDEN[r.syntax]]
    decidable = [r for r in rows if r.kind not in HIDDEN[r.syntax]]
    return {
        "seed": seed,
        "outputs": total,
        "agree": agree,
        "decidable_outputs": sum(r.outputs for r in decidable),
        "decidable_agree": sum(r.agree for r in decidable),
        "hidden_outputs": sum(r.outputs for r in hidden),
        "hidden_agree": sum(r.agree for r in hidden),
        "kinds": [asdict(r) for r in rows],
        "disagreements": diffs,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2200, help="outputs per syntax")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="write the result as JSON")
    args = ap.parse_args()
    res = run(args.n, args.seed)
    print(
        f"{'syntax':<12} {'kind':<16} {'outputs':>7} {'agree':>6} {'in-proc ok':>10} {'served ok':>9}"
    )
    for r in res["kinds"]:
        flag = "  (hidden by the server)" if r["kind"] in HIDDEN[r["syntax"]] else ""
        print(f"{r['syntax']:<12} {r['kind']:<16} {r['outputs']:>7} {r['agree']:>6} "
              f"{r['in_process_accepts']:>10} {r['served_accepts']:>9}{flag}")  # fmt: skip
    print(
        f"agree on {res['agree']} of {res['outputs']} outputs; where the server lets the client "
        f"decide: {res['decidable_agree']} of {res['decidable_outputs']}; hidden by the "
        f"server's parser: {res['hidden_agree']} of {res['hidden_outputs']}"
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=1, ensure_ascii=False))
    sys.exit(0)


if __name__ == "__main__":
    main()
