"""An env's commands as function tools: the declaration, and the mapping between calls and actions.

An env that can be driven by tool calls declares, in its **reset info**:

- ``info["tools"]``: its tools as OpenAI function schemas (``{"type": "function", "function":
  {"name", "description", "parameters": {"type": "object", "properties", "required"}}}``), the
  list a chat template renders with ``apply_chat_template(..., tools=...)``;
- ``info["tool_actions"]`` (optional): per tool name, the text command a call becomes, a template
  with one ``{argument}`` placeholder per argument, e.g. ``{"search": "search[{query}]"}`` or
  ``{"move": "{direction}"}``. A tool without a template becomes the JSON text
  ``{"name": ..., "arguments": {...}}`` (keys sorted), which the env then parses itself.

The env keeps its text actions: a tool call is turned into the command (:func:`call_to_action`)
before ``step``, so one env trains in either action format, and its ``admissible_actions`` map
back to calls (:func:`action_to_call`) for constrained decoding and the expert, or narrow the
declaration to them as strict functions (:func:`admissible_tools`) for an agent program. :func:`tool` and
:func:`tool_info` write a declaration in a few lines; :func:`tools_problem` checks one (the env
contract's ``tools`` rule). Arguments are strings, integers, numbers or booleans, optionally with
an ``enum``. This module imports nothing from agentrl.
"""

from __future__ import annotations

import copy
import json
import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "TOOLS_KEY",
    "TOOL_ACTIONS_KEY",
    "action_to_call",
    "admissible_tools",
    "call_problem",
    "call_to_action",
    "fresh",
    "tool",
    "tool_info",
    "tools_problem",
]

TOOLS_KEY = "tools"
TOOL_ACTIONS_KEY = "tool_actions"

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


def tool(name: str, description: str, **params: str | Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI function tool: every keyword is a required argument, given as its description
    (a string argument) or as its JSON schema (``{"type": "string", "enum": [...]}``).

    >>> tool("move", "Move one cell.", direction={"type": "string", "enum": ["up", "down"]})
    """
    props = {
        k: {"type": "string", "description": v} if isinstance(v, str) else dict(v)
        for k, v in params.items()
    }
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": props,
                "required": list(props),
                "additionalProperties": False,
            },
        },
    }


def tool_info(
    tools: Sequence[Mapping[str, Any]], actions: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The reset-info entries of a declaration (``info.update(tool_info(...))``); checked."""
    problem = tools_problem(tools, actions)
    if problem:
        raise ValueError(f"tool declaration: {problem}")
    out: dict[str, Any] = {TOOLS_KEY: [json.loads(json.dumps(t)) for t in tools]}
    if actions:
        out[TOOL_ACTIONS_KEY] = dict(actions)
    return out


def fresh(declaration: Mapping[str, Any]) -> dict[str, Any]:
    """A new copy of a declaration (:func:`tool_info`'s) for one reset info: Gymnasium asks that
    infos share no object, since callers may keep or change them."""
    return copy.deepcopy(dict(declaration))


def _function(t: Any) -> Mapping[str, Any] | None:
    fn = t.get("function") if isinstance(t, Mapping) else None
    return fn if isinstance(fn, Mapping) else None


def _placeholders(template: str) -> list[str] | None:
    try:
        return [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError:
        return None


def tools_problem(tools: Any, actions: Any = None) -> str | None:
    """Why ``tools`` (and ``actions``) is not a valid declaration, else ``None``."""
    if not isinstance(tools, Sequence) or isinstance(tools, str) or not tools:
        return "info['tools'] must be a non-empty list of function tools"
    names: list[str] = []
    for i, t in enumerate(tools):
        fn = _function(t)
        if not isinstance(t, Mapping) or t.get("type") != "function" or fn is None:
            return f"tool {i} is not {{'type': 'function', 'function': {{...}}}}"
        name = fn.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            return f"tool {i} has no valid name (letters, digits, _ . -): {name!r}"
        if name in names:
            return f"tool {name!r} is declared twice"
        names.append(name)
        params = fn.get("parameters", {"type": "object", "properties": {}})
        props = params.get("properties", {}) if isinstance(params, Mapping) else None
        if not isinstance(params, Mapping) or params.get("type") != "object":
            return f"tool {name!r}: parameters must be a JSON schema of type object"
        if not isinstance(props, Mapping):
            return f"tool {name!r}: parameters.properties must be an object"
        for p, schema in props.items():
            kind = schema.get("type") if isinstance(schema, Mapping) else None
            if kind not in _TYPES:
                return f"tool {name!r}: argument {p!r} needs a type among {', '.join(_TYPES)}"
        required = params.get("required", [])
        if not isinstance(required, list) or any(r not in props for r in required):
            return f"tool {name!r}: required lists an argument it does not declare"
        template = (actions or {}).get(name) if isinstance(actions, Mapping) else None
        if template is not None:
            fields = _placeholders(template) if isinstance(template, str) else None
            if fields is None or any(f not in props for f in fields):
                return f"tool_actions[{name!r}] = {template!r}: placeholders must name arguments"
            if sorted(set(fields)) != sorted(set(required)) or set(props) - set(required):
                return f"tool_actions[{name!r}] must use every argument (all required)"
    if actions is not None:
        if not isinstance(actions, Mapping):
            return "info['tool_actions'] must map tool names to command templates"
        extra = [k for k in actions if k not in names]
        if extra:
            return f"tool_actions names undeclared tools: {', '.join(map(str, extra))}"
    return None


def _find(tools: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    for t in tools:
        fn = _function(t)
        if fn is not None and fn.get("name") == name:
            return fn
    return None


def call_problem(tools: Sequence[Mapping[str, Any]], name: Any, arguments: Any) -> str | None:
    """Why the call ``name(**arguments)`` does not fit ``tools``, else ``None``."""
    if not isinstance(name, str) or not name:
        return "the call has no tool name"
    fn = _find(tools, name)
    if fn is None:
        known = ", ".join(str((_function(t) or {}).get("name")) for t in tools)
        return f"unknown tool {name[:40]!r} (tools: {known})"
    if not isinstance(arguments, Mapping):
        return f"the arguments of {name} must be a JSON object, got {type(arguments).__name__}"
    params = fn.get("parameters") or {}
    props = params.get("properties") or {}
    missing = [p for p in params.get("required", []) if p not in arguments]
    if missing:
        return f"{name} misses argument(s) {', '.join(missing)}"
    extra = [str(a) for a in arguments if a not in props]
    if extra:
        return f"{name} takes no argument(s) {', '.join(e[:40] for e in extra)}"
    for p, value in arguments.items():
        schema = props[p]
        kinds = _TYPES[schema["type"]]
        if not isinstance(value, kinds) or (schema["type"] != "boolean" and type(value) is bool):
            return f"{name}: argument {p} must be a {schema['type']}, got {json.dumps(value)[:40]}"
        if isinstance(value, str) and not value.strip():
            return f"{name}: argument {p} is empty"
        if "enum" in schema and value not in schema["enum"]:
            options = ", ".join(json.dumps(v) for v in schema["enum"])
            return f"{name}: argument {p} must be one of {options}, got {json.dumps(value)[:40]}"
    return None


def call_to_action(
    name: str, arguments: Mapping[str, Any], actions: Mapping[str, str] | None
) -> str:
    """The env's text command for a (checked) call: its template filled, else the call's JSON."""
    template = (actions or {}).get(name)
    if template is None:
        return json.dumps({"name": name, "arguments": dict(arguments)}, sort_keys=True)
    values = {k: v if isinstance(v, str) else json.dumps(v) for k, v in arguments.items()}
    return template.format(**values)


def _pattern(template: str) -> re.Pattern[str]:
    parts = []
    for literal, field, _spec, _conv in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if field is not None:
            parts.append(f"(?P<{field}>.+?)")
    return re.compile("^" + "".join(parts) + "$", re.DOTALL)


def action_to_call(
    action: str, tools: Sequence[Mapping[str, Any]], actions: Mapping[str, str] | None
) -> tuple[str, dict[str, Any]] | None:
    """The call that :func:`call_to_action` turns into ``action`` (``None``: no tool writes it).

    Templates are tried in declaration order; a match must fit the tool's schema and render back
    to ``action`` exactly. A JSON action (``{"name", "arguments"}``) maps to itself.
    """
    for t in tools:
        fn = _function(t) or {}
        name = fn.get("name")
        template = (actions or {}).get(name)
        if template is None:
            continue
        m = _pattern(template).match(action)
        if m is None:
            continue
        args: dict[str, Any] = dict(m.groupdict())
        props = (fn.get("parameters") or {}).get("properties") or {}
        for k, v in list(args.items()):
            if props.get(k, {}).get("type") in ("integer", "number", "boolean"):
                try:
                    args[k] = json.loads(v)
                except ValueError:
                    break
        else:
            if call_problem(tools, name, args) is None and (
                call_to_action(name, args, actions) == action
            ):
                return name, args
    try:
        obj = json.loads(action)
    except ValueError:
        return None
    if isinstance(obj, dict) and set(obj) == {"name", "arguments"}:
        name, args = obj["name"], obj["arguments"]
        if (actions or {}).get(name) is None and call_problem(tools, name, args) is None:
            return name, dict(args)
    return None


def admissible_tools(
    tools: Sequence[Mapping[str, Any]],
    actions: Mapping[str, str] | None,
    admissible: Sequence[str],
) -> list[dict[str, Any]]:
    """``tools`` narrowed to the calls that write ``admissible`` actions, as OpenAI strict
    functions: each argument an ``enum`` of the values those calls give it (for a tool of several
    arguments, any combination of them), a tool no admissible action calls left out. Offered with
    ``tool_choice="required"``, an endpoint that enforces strict schemas (agentrl's gateway)
    samples only admissible calls, as in-process constrained decoding does. Empty when no
    declared tool writes any of the actions."""
    values: dict[str, dict[str, list[Any]]] = {}
    for action in admissible:
        call = action_to_call(action, tools, actions)
        if call is None:
            continue
        per_arg = values.setdefault(call[0], {})
        for k, v in call[1].items():
            if v not in per_arg.setdefault(k, []):
                per_arg[k].append(v)
    out = []
    for t in tools:
        fn = _function(t) or {}
        if fn.get("name") not in values:
            continue
        narrowed = copy.deepcopy(dict(t))
        f = narrowed["function"] = dict(narrowed["function"])
        params = f.setdefault("parameters", {"type": "object", "properties": {}})
        for k, options in values[fn["name"]].items():
            params["properties"][k] = {**params["properties"][k], "enum": options}
        params["required"], params["additionalProperties"] = list(params["properties"]), False
        f["strict"] = True
        out.append(narrowed)
    return out
