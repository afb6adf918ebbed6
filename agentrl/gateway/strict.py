"""``tool_choice`` enforced as OpenAI's strict function calling does: the calls a reply may be.

OpenAI guarantees that a reply to ``tool_choice="required"`` (or a named function) is a call, and
that a ``strict`` function's arguments fit its schema. The gateway gives the same guarantee by
constrained decoding wherever the offered functions' argument values are a finite set: every
argument an ``enum``, a ``const`` or a boolean (an optional argument may also be left out). Then
every allowed call is written out in the chat template's call syntax with the in-process
tool-call format's own writer (:func:`agentrl.rollout.tools.render_call`), tokenised with the stop
token after it exactly as the in-process constrained format does, and the engine samples within
that trie (``allowed``, :mod:`agentrl.backends.base`). The recorded step carries the trie's
per-position token sets, so the learner renormalises its log-probs the same way.

Anything else (``auto``, ``none``, a free-form argument, more than :data:`MAX_CALLS` calls)
samples unconstrained and the reply is read from the text.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from ..rollout.tools import render_call

__all__ = ["MAX_CALLS", "allowed_calls"]

#: The most calls one constrained request may allow; past it the request samples unconstrained.
MAX_CALLS = 4096
_ABSENT = object()


def _values(schema: Any, required: bool) -> list[Any] | None:
    """The values one argument may take (``_ABSENT``: left out), or ``None`` when unbounded."""
    if not isinstance(schema, Mapping):
        return None
    if "const" in schema:
        values = [schema["const"]]
    elif isinstance(schema.get("enum"), list) and schema["enum"]:
        values = list(schema["enum"])
    elif schema.get("type") == "boolean":
        values = [False, True]
    else:
        return None
    return values if required else [_ABSENT, *values]


def _calls_of(fn: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """Every argument object ``fn`` accepts, in its properties' order; ``None``: unbounded."""
    params = fn.get("parameters") or {"type": "object", "properties": {}}
    if not isinstance(params, Mapping):
        return None
    props = params.get("properties") or {}
    if not isinstance(props, Mapping):
        return None
    required = set(params.get("required") or ())
    names, choices = list(props), []
    for p in names:
        values = _values(props[p], p in required)
        if values is None:
            return None
        choices.append(values)
    n = 1
    for c in choices:
        n *= len(c)
        if n > MAX_CALLS:
            return None
    return [
        {k: v for k, v in zip(names, combo) if v is not _ABSENT}
        for combo in itertools.product(*choices)
    ]


def allowed_calls(
    tools: Sequence[Mapping[str, Any]], tool_choice: str, tool_name: str | None, syntax: str
) -> list[tuple[str, dict[str, Any], str]] | None:
    """``(name, arguments, text)`` of every call a reply may be under ``tool_choice``, each
    written in ``syntax``; ``None`` when the reply is free (``auto``/``none``, no tools, a
    function with an unbounded argument, or more than :data:`MAX_CALLS` calls)."""
    if tool_choice != "required" or not tools:
        return None
    out: list[tuple[str, dict[str, Any], str]] = []
    for t in tools:
        fn = t.get("function") or {}
        name = fn.get("name")
        if tool_name is not None and name != tool_name:
            continue
        calls = _calls_of(fn)
        if calls is None:
            return None
        out += [(name, args, render_call(syntax, name, args)) for args in calls]
        if len(out) > MAX_CALLS:
            return None
    return out or None
