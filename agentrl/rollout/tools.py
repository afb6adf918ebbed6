r"""The tool-call action format: the model calls one of the env's tools in its chat template's syntax.

The env declares its tools in its reset info (``info["tools"]``, OpenAI function schemas, and
``info["tool_actions"]``, the command each call becomes; :mod:`agentrl.envs.tools`). The prompt
renders them through the tokenizer's own chat template (``apply_chat_template(..., tools=...)``,
:class:`~agentrl.rollout.PromptBuilder`); observations after a call go back as ``tool`` messages.
A response is read in the template's syntax (:data:`SYNTAXES`):

- ``hermes`` (Hermes, Qwen2.5, Qwen3, the embedded tiny model):
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``;
- ``llama3_json`` (Llama 3.1/3.2/3.3 custom tools): a bare JSON object
  ``{"name": ..., "parameters": {...}}`` (``<|python_tag|>`` before it is allowed).

Exactly one call per response (an env step takes one action), optionally after a ``<think>``
block (``think``). Anything else is an invalid step whose reason says what was wrong (no call,
unclosed or nested tags, bad JSON, text around the call, several calls, a key other than the
name and the arguments, arguments given as a JSON-encoded string or under the other syntax's
key, an unknown tool, missing or extra arguments, a wrong type or value); the next prompt
repeats that reason after the observation (:meth:`ToolCallFormat.prompt_note`). Nothing raises.
Every rule, and how each compares with vLLM's own ``hermes`` and ``llama3_json`` parsers (the
served path, ``agent=endpoint agent.native_tools=true``), is listed in docs/envs/contract.md
("What a tool call must look like"); ``scripts/tool_call_corpus.py`` measures the agreement. A
valid call becomes the env's text command (:func:`agentrl.envs.tools.call_to_action`), so the
env, the credit module and the step batch see the same actions as under the tag format; the
reverse mapping renders the admissible actions as calls for constrained decoding
(:meth:`ToolCallFormat.renders`).

Differences from native tool calling of an OpenAI-style server: the call is read from the
sampled text (the engine runs no tool parser), and a response with several calls is invalid
rather than executed in order.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentrl.envs.tools import (
    TOOL_ACTIONS_KEY,
    TOOLS_KEY,
    action_to_call,
    call_problem,
    call_to_action,
)

from .parse import FLAGS, ActionFormat, ParsedAction

__all__ = ["HINT", "SYNTAXES", "ToolCallFormat", "detect_syntax", "render_call", "tool_format"]

SYNTAXES = ("hermes", "llama3_json")
#: The prompt's closing instruction under the tool-call format.
HINT = "Call exactly one of the tools per turn."

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_THINK = re.compile(r"<think>.*?</think>", FLAGS)
_PYTHON_TAG = "<|python_tag|>"


def detect_syntax(chat_template: Any) -> str:
    """The tool-call syntax a chat template teaches (``hermes`` or ``llama3_json``); raises
    ``ValueError`` when it shows neither (set ``rollout.tool_syntax``)."""
    text = chat_template if isinstance(chat_template, str) else ""
    if isinstance(chat_template, Mapping):  # named templates: the default one, else any
        text = str(chat_template.get("default") or " ".join(map(str, chat_template.values())))
    if _OPEN in text:
        return "hermes"
    if '"parameters"' in text or "ipython" in text:
        return "llama3_json"
    raise ValueError(
        "cannot tell the tool-call syntax of this chat template (it shows neither <tool_call> nor "
        "Llama 3.1's JSON calls); set rollout.tool_syntax to hermes or llama3_json"
    )


def render_call(syntax: str, name: str, arguments: Mapping[str, Any]) -> str:
    """A call as the template's syntax writes it (the form Qwen's and Llama's templates render
    an assistant's ``tool_calls`` in)."""
    args = json.dumps(dict(arguments), ensure_ascii=False)
    if syntax == "hermes":
        return f'{_OPEN}\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {args}}}\n{_CLOSE}'
    return f'{{"name": {json.dumps(name, ensure_ascii=False)}, "parameters": {args}}}'


def _json(body: str, finish_reason: str) -> tuple[Any, int] | str:
    """The first JSON value of ``body`` and where it ends, or why there is none."""
    try:
        return json.JSONDecoder().raw_decode(body)
    except json.JSONDecodeError as exc:
        if finish_reason != "stop":  # the response ran into the token cap
            return "the tool call was cut at the token limit"
        return f"bad JSON in the tool call: {exc.msg} at character {exc.pos}"
    except RecursionError:
        return "bad JSON in the tool call: nested too deeply"


#: The keys a call object holds, per syntax: the name and its arguments' key(s). Hermes writes
#: ``arguments`` only (vLLM's ``hermes`` parser finds no call under another key); Llama 3.1's
#: JSON calls write ``parameters``, and vLLM's ``llama3_json`` parser takes ``arguments`` too.
_ARGS_KEYS = {"hermes": ("arguments",), "llama3_json": ("parameters", "arguments")}


def _call_of(obj: Any, syntax: str) -> tuple[str, Any] | str:
    """``(name, arguments)`` of a decoded call object, or why it is not one (the rules of
    docs/envs/contract.md, "What a tool call must look like")."""
    if not isinstance(obj, dict):
        return f"the tool call must be a JSON object, got {type(obj).__name__}"
    keys = _ARGS_KEYS[syntax]
    present = [k for k in keys if k in obj]
    if len(present) > 1:
        return f"the tool call has both {' and '.join(map(json.dumps, present))}; write one"
    key = present[0] if present else keys[0]
    extra = sorted(set(obj) - {"name", key})
    if "parameters" in extra and syntax == "hermes" and not present:
        return 'the tool call names its arguments "parameters"; this syntax writes "arguments"'
    if extra:
        return f"the tool call has unexpected key(s) {', '.join(k[:20] for k in extra)}"
    if "name" not in obj:
        return "the tool call has no name"
    if key not in obj:
        return (
            f'the tool call has no "{key}" (a call of a tool without arguments writes '
            f'"{key}": {{}})'
        )
    args = obj[key]
    if isinstance(args, str):
        return _encoded(key)
    return obj["name"], args


def _encoded(key: str) -> str:
    """The reason of arguments given as a JSON-encoded string (``"{\\"q\\": ...}"``)."""
    return f'the tool call\'s "{key}" is a JSON-encoded string; write the object itself ("{key}": {{...}})'


@dataclass(frozen=True)
class ToolCallFormat(ActionFormat):
    """Actions as one tool call per response (see the module docstring).

    Args:
        syntax: ``hermes`` or ``llama3_json``.
        tools / tool_actions: the episode's declaration (:meth:`bind` sets them from the reset
            info; unbound, every response is invalid).
        think, require_think, max_action_chars: as for :class:`ActionFormat`.
    """

    pattern: str | None = None
    template: str = "{action}"
    syntax: str = "hermes"
    tools: tuple[Mapping[str, Any], ...] = ()
    tool_actions: Mapping[str, str] = field(default_factory=dict)

    #: Observations after a call go back as ``tool`` messages.
    observation_role = "tool"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.syntax not in SYNTAXES:
            raise ValueError(
                f"tool syntax must be one of {', '.join(SYNTAXES)}, got {self.syntax!r}"
            )

    # -- per episode ------------------------------------------------------------------------------
    def bind(self, info: Mapping[str, Any]) -> ToolCallFormat:
        """This format with the tools an episode's reset info declares."""
        tools = info.get(TOOLS_KEY) or ()
        actions = info.get(TOOL_ACTIONS_KEY) or {}
        if tuple(tools) == self.tools and dict(actions) == dict(self.tool_actions):
            return self
        return dataclasses.replace(self, tools=tuple(tools), tool_actions=dict(actions))

    @property
    def prompt_tools(self) -> list[dict[str, Any]] | None:
        """The tools the prompt's chat template renders."""
        return [dict(t) for t in self.tools] or None

    # -- reading a response -----------------------------------------------------------------------
    def parse(self, response: str, finish_reason: str = "stop") -> ParsedAction:
        found = self.read_call(response, finish_reason)
        if isinstance(found, str):
            return ParsedAction(None, found)
        return self.parse_call(*found)

    def read_call(self, response: str, finish_reason: str = "stop") -> tuple[str, Any] | str:
        """``(name, arguments)`` of the one call in ``response`` as the template's syntax writes
        it (not yet checked against the tools), or why there is none: the reading :meth:`parse`
        and the OpenAI-compatible gateway (:mod:`agentrl.gateway`) share."""
        if not isinstance(response, str) or not response.strip():
            return "empty response"
        text = response
        if self.require_think and not _THINK.search(text):
            return "missing <think> block"
        if self.think:
            text = _THINK.sub("", text)
        if not self.tools:
            return "the env declares no tools (info['tools'])"
        if self.syntax == "hermes":
            return self._hermes(text, finish_reason)
        return self._llama(text, finish_reason)

    def beside_call(self, text: str | None) -> str:
        """Why ``text`` that came with a call already split off (an endpoint's ``content`` next
        to its ``tool_calls``) makes the step invalid, as :meth:`parse` judges the text around a
        call; ``""`` when it does not."""
        text = text or ""
        if self.require_think and not _THINK.search(text):
            return "missing <think> block"
        rest = (_THINK.sub("", text) if self.think else text).strip()
        return f"text around the tool call: {rest[:40]!r}" if rest else ""

    def parse_call(self, name: Any, arguments: Any) -> ParsedAction:
        """The env action of one call already split into ``name`` and ``arguments`` (a mapping,
        or OpenAI's JSON string), e.g. an endpoint's native ``tool_calls``: checked against the
        declared tools and mapped to the env's command as :meth:`parse` does. A JSON string that
        decodes to a string is what a server's parser makes of arguments the model wrote as a
        JSON-encoded string: refused, as :meth:`parse` refuses them."""
        if not self.tools:
            return ParsedAction(None, "the env declares no tools (info['tools'])")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except (ValueError, RecursionError):
                return ParsedAction(None, "the tool call's arguments string is not JSON")
            if isinstance(arguments, str):  # the model wrote a string where the object goes
                return ParsedAction(None, _encoded(_ARGS_KEYS[self.syntax][0]))
        problem = call_problem(self.tools, name, arguments)
        if problem:
            return ParsedAction(None, problem)
        action = call_to_action(name, arguments, self.tool_actions)
        if not action.strip():
            return ParsedAction(None, "empty action")
        if len(action) > self.max_action_chars:
            return ParsedAction(None, "action too long")
        return ParsedAction(action)

    def _hermes(self, text: str, finish_reason: str) -> tuple[str, Any] | str:
        """The call of a Hermes response. A call runs from the first ``<tool_call>`` to the
        first ``</tool_call>`` after it, as vLLM's ``hermes`` parser reads it: its body is one
        JSON object (``<tool_call>`` inside one of its strings is text; ``</tool_call>`` there
        ends the call early)."""
        start = text.find(_OPEN)
        if start < 0:
            if finish_reason != "stop":
                return "no <tool_call> before the token limit"
            return (
                "no <tool_call> block" if _CLOSE not in text else "</tool_call> without <tool_call>"
            )
        end = text.find(_CLOSE, start)
        if end < 0:
            if finish_reason != "stop":
                return "the tool call was cut at the token limit"
            return "unclosed <tool_call>"
        body = text[start + len(_OPEN) : end].strip()
        before, after = text[:start], text[end + len(_CLOSE) :]
        if body.startswith(_OPEN):
            return "nested <tool_call> tags"
        decoded = _json(body, "stop")
        if isinstance(decoded, str):
            close, opens = after.find(_CLOSE), after.find(_OPEN)
            if close >= 0 and (opens < 0 or close < opens):
                return "</tool_call> inside the tool call (a call ends at its first </tool_call>)"
            return decoded
        if _OPEN in after:
            return f"{1 + after.count(_OPEN)} tool calls; one is allowed per turn"
        outside = (before.strip() + " " + after.strip()).strip()
        if outside:
            return f"text around the tool call: {outside[:40]!r}"
        obj, at = decoded
        if body[at:].strip():
            return "text after the JSON object inside <tool_call>"
        return _call_of(obj, "hermes")

    def _llama(self, text: str, finish_reason: str) -> tuple[str, Any] | str:
        body = text.strip()
        if body.startswith(_PYTHON_TAG):
            body = body[len(_PYTHON_TAG) :].lstrip()
        if not body.startswith("{"):
            if "{" in body:
                return f"text around the tool call: {body[: body.index('{')].strip()[:40]!r}"
            return "no tool call (a JSON object)"
        decoded = _json(body, finish_reason)
        if isinstance(decoded, str):
            return decoded
        obj, end = decoded
        rest = body[end:].strip()
        if rest:
            if rest.lstrip(";, \n").startswith("{"):
                return "several tool calls; one is allowed per turn"
            return f"text around the tool call: {rest[:40]!r}"
        return _call_of(obj, "llama3_json")

    # -- writing a call (constrained decoding, the expert's responses) -----------------------------
    def renders(self, action: str, memory: Any = None) -> list[str]:
        """The call that writes ``action`` (none where no declared tool writes it: such an action
        is then left out of the constrained choices)."""
        call = action_to_call(action, self.tools, self.tool_actions) if self.tools else None
        return [] if call is None else [render_call(self.syntax, *call)]

    def render(self, action: str) -> str:
        texts = self.renders(action)
        return texts[0] if texts else action

    # -- the reason of an invalid call, shown with the next observation ---------------------------
    def remember(self, memory: Any, response: str) -> Any:
        return self.parse(response).reason or None

    def prompt_note(self, memory: Any = None) -> str:
        return f"\nYour last tool call was invalid: {memory}." if memory else ""


def tool_format(settings: Mapping[str, Any], syntax: str) -> ToolCallFormat:
    """The format from ``rollout.action`` settings (its ``pattern``/``template`` do not apply)."""
    keep = {k: settings[k] for k in ("think", "require_think", "max_action_chars") if k in settings}
    return ToolCallFormat(syntax=syntax, **keep)
