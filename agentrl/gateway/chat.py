"""The chat layer of the gateway: an OpenAI request's messages to prompt token ids, and the sampled
tokens back to an OpenAI reply.

Prompts are rendered by the policy's own chat template (``apply_chat_template(..., tools=...)``),
as the in-process tool-call format renders them. An assistant message's ``tool_calls`` are written
back into its text in the template's call syntax (:func:`agentrl.rollout.tools.render_call`, the
form the model samples them in), so every template sees the calls. A reply is read with the
tool-call format's own reader (:meth:`agentrl.rollout.tools.ToolCallFormat.read_call`): one call
per response, optionally after a ``<think>`` block; anything else comes back as text.

Nothing here holds state or serves HTTP (:mod:`agentrl.gateway.server` does).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..rollout.tools import ToolCallFormat, render_call

__all__ = ["BadRequest", "ChatRequest", "Reply", "Renderer", "parse_request", "read_reply"]

_ROLES = ("system", "developer", "user", "assistant", "tool")
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


class BadRequest(ValueError):
    """A request the gateway refuses (HTTP 400), with the parameter it is about."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Call:
    """One tool call: its id, the function's name and its arguments (a JSON object)."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Message:
    """One chat message, normalised: text content, and an assistant's calls."""

    role: str
    content: str
    calls: tuple[tuple[str, str], ...] = ()  # (name, arguments as canonical JSON)
    tool_call_id: str = ""
    name: str = ""

    def template(self, syntax: str) -> dict[str, str]:
        """The message as the chat template receives it (calls written into the text)."""
        text = self.content
        if self.calls:
            calls = "\n".join(render_call(syntax, n, json.loads(a)) for n, a in self.calls)
            text = f"{text}\n{calls}" if text else calls
        role = "system" if self.role == "developer" else self.role
        return {"role": role, "content": text}


@dataclass(frozen=True)
class ChatRequest:
    """A checked ``/v1/chat/completions`` body."""

    model: str
    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] = ()
    tools_key: str = ""  # the tools' JSON text (one rendering per dialogue and tools)
    tool_choice: str = "auto"  # auto, none or required (a named function is required + its name)
    tool_name: str | None = None  # the function a named tool_choice forces
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    stream: bool = False
    include_usage: bool = False


def _text(content: Any, where: str) -> str:
    """A message's content as text (a string, a list of text parts, or null)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, Mapping) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise BadRequest(f"{where}: only text content parts are supported, got {kind!r}",
                                 "messages")  # fmt: skip
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise BadRequest(f"{where}: content must be a string or a list of parts", "messages")


def _calls(raw: Any, where: str) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise BadRequest(f"{where}: tool_calls must be a list", "messages")
    out = []
    for j, c in enumerate(raw):
        fn = c.get("function") if isinstance(c, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise BadRequest(f"{where}: tool_calls[{j}] has no function name", "messages")
        args = fn.get("arguments", "{}")
        try:
            obj = json.loads(args) if isinstance(args, str) else args
        except ValueError:
            raise BadRequest(f"{where}: tool_calls[{j}].function.arguments is not JSON",
                             "messages") from None  # fmt: skip
        out.append((fn["name"], json.dumps(obj, sort_keys=True, ensure_ascii=False)))
    return tuple(out)


def _message(i: int, m: Any) -> Message:
    where = f"messages[{i}]"
    if not isinstance(m, Mapping):
        raise BadRequest(f"{where} must be an object", "messages")
    role = m.get("role")
    if role not in _ROLES:
        raise BadRequest(f"{where}: role must be one of {', '.join(_ROLES)}, got {role!r}",
                         "messages")  # fmt: skip
    calls = _calls(m.get("tool_calls"), where) if role == "assistant" else ()
    return Message(role, _text(m.get("content"), where), calls,
                   str(m.get("tool_call_id") or ""), str(m.get("name") or ""))  # fmt: skip


def _number(body: Mapping[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int | float) or not lo <= v <= hi:
        raise BadRequest(f"{key} must be a number in [{lo}, {hi}], got {v!r}", key)
    return float(v)


def _tools(raw: Any) -> tuple[tuple[dict[str, Any], ...], str]:
    """The checked tools (a deep copy) and their JSON text (the renderer's cache key)."""
    if raw is None:
        return (), ""
    if not isinstance(raw, list):
        raise BadRequest("tools must be a list of function tools", "tools")
    for i, t in enumerate(raw):
        fn = t.get("function") if isinstance(t, Mapping) else None
        if t.get("type") != "function" or not isinstance(fn, Mapping) or not fn.get("name"):
            raise BadRequest(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ...}}}}",
                             "tools")  # fmt: skip
    text = json.dumps(raw)
    return tuple(json.loads(text)), text


def parse_request(body: Any) -> ChatRequest:
    """The checked request; :class:`BadRequest` names what is wrong."""
    if not isinstance(body, Mapping):
        raise BadRequest("the body must be a JSON object")
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise BadRequest("messages must be a non-empty list", "messages")
    if body.get("n", 1) != 1:
        raise BadRequest("n must be 1 (one choice per call)", "n")
    tools, tools_key = _tools(body.get("tools"))
    choice = body.get("tool_choice", "auto" if tools else "none")
    name = None
    if isinstance(choice, Mapping):  # {"type": "function", "function": {"name": ...}}
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if choice.get("type") != "function" or not isinstance(name, str):
            raise BadRequest("tool_choice as an object must be {'type': 'function', "
                             "'function': {'name': ...}}", "tool_choice")  # fmt: skip
        if name not in {t["function"]["name"] for t in tools}:
            raise BadRequest(f"tool_choice names function {name[:40]!r}, which tools does not "
                             "declare", "tool_choice")  # fmt: skip
        choice = "required"
    if choice not in ("auto", "none", "required"):
        raise BadRequest(f"tool_choice must be auto, none, required or a function, got {choice!r}",
                         "tool_choice")  # fmt: skip
    if choice == "required" and not tools:
        raise BadRequest("tool_choice required needs tools", "tool_choice")
    cap = body.get("max_completion_tokens", body.get("max_tokens"))
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise BadRequest(f"max_tokens must be a positive integer, got {cap!r}", "max_tokens")
    stop = body.get("stop")
    stop = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if not all(isinstance(s, str) and s for s in stop) or len(stop) > 4:
        raise BadRequest("stop must be a string or a list of up to 4 non-empty strings", "stop")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise BadRequest(f"seed must be an integer, got {seed!r}", "seed")
    options = body.get("stream_options") or {}
    return ChatRequest(
        model=str(body.get("model") or ""),
        messages=tuple(_message(i, m) for i, m in enumerate(raw)),
        tools=tools,
        tools_key=tools_key,
        tool_choice=str(choice),
        tool_name=name,
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 1e-9, 1.0),
        max_tokens=cap,
        stop=stop,
        seed=seed,
        stream=bool(body.get("stream", False)),
        include_usage=bool(isinstance(options, Mapping) and options.get("include_usage")),
    )


class Renderer:
    """Prompt token ids of a request with the tokenizer's chat template."""

    #: Stands for a recorded assistant response when a continuation is rendered.
    MARK = "AGENTRL_RESPONSE_MARK"

    def __init__(self, tokenizer: Any, syntax: str):
        self.tokenizer, self.syntax = tokenizer, syntax
        stop = getattr(tokenizer, "eos_token_id", None)
        self.stop_id = None if stop is None else int(stop)
        self.stop_text = "" if stop is None else tokenizer.decode([stop], skip_special_tokens=False)
        self._responses: dict[str, tuple[int, ...]] = {}
        self._rendered: dict[Hashable, tuple[int, ...]] = {}  # prompt ids per dialogue and tools
        self._tail_free: dict[tuple[str, ...], bool] = {}  # roles -> tail written without tools

    def _render(self, msgs: list[dict[str, str]], tools: Sequence[dict[str, Any]]) -> str:
        kw: dict[str, Any] = {"tools": list(tools)} if tools else {}
        try:
            return self.tokenizer.apply_chat_template(
                msgs, add_generation_prompt=True, tokenize=False, **kw
            )
        except Exception as exc:  # a template that refuses the dialogue (roles out of order)
            raise BadRequest(f"the chat template cannot render these messages: {exc}",
                             "messages") from None  # fmt: skip

    def ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def response_ids(self, text: str) -> tuple[int, ...]:
        """The token ids of a response that is exactly ``text`` and then the stop token, as the
        in-process constrained format tokenises an allowed action (cached)."""
        got = self._responses.get(text)
        if got is None:
            if len(self._responses) >= 65536:
                self._responses.clear()
            got = self._responses[text] = (*self.ids(text), *([] if self.stop_id is None else
                                                                [self.stop_id]))  # fmt: skip
        return got

    def _cached(self, key: Hashable, make: Callable[[], list[int]]) -> list[int]:
        got = self._rendered.get(key)
        if got is None:
            if len(self._rendered) >= 4096:
                self._rendered.clear()
            got = self._rendered[key] = tuple(make())
        return list(got)

    def full(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]], tools_key: str = ""
    ) -> list[int]:
        """The whole dialogue rendered afresh, with the generation prompt (memoised on the
        messages and ``tools_key``, the tools' JSON text; computed when not given)."""
        key = ("full", tuple(messages), tools_key or json.dumps(list(tools)))
        return self._cached(key, lambda: self.ids(
            self._render([m.template(self.syntax) for m in messages], tools)))  # fmt: skip

    def extend(
        self,
        prompt_ids: Sequence[int],
        response_ids: Sequence[int],
        new: Sequence[Message],
        tools: Sequence[dict[str, Any]],
        tools_key: str = "",
    ) -> list[int]:
        """A recorded call's exact prompt and response ids, then the template's text after an
        assistant turn for the ``new`` messages (rendered on a stand-in dialogue, so a template
        that rewrites past turns changes nothing here). A response that ended with the stop token
        has closed its turn: the continuation's copy of that token is left out. The rendering of
        ``new`` is memoised on the messages and ``tools_key``.

        Most templates write the tools before the first turn, so the text after an assistant
        turn does not depend on them, and rendering the stand-in without them saves the tools'
        rendering (about a millisecond for two tools). Whether that holds is checked, per
        sequence of roles in ``new``, on the first continuation with tools: both renderings are
        made and compared (a template that writes the tools before the last user message, as
        Mistral's does, keeps them)."""
        closed = bool(response_ids) and response_ids[-1] == self.stop_id
        if tools:
            roles = tuple(m.role for m in new)
            free = self._tail_free.get(roles)
            if free is None:
                with_tools = self._tail(new, tools)
                free = self._tail_free[roles] = with_tools == self._tail(new, ())
            if free:
                tools, tools_key = (), "[]"
        key = ("extend", tuple(new), tools_key or json.dumps(list(tools)), closed)

        def tail() -> list[int]:
            text = self._tail(new, tools)
            if closed and text.startswith(self.stop_text):
                text = text[len(self.stop_text) :]
            return self.ids(text)

        return [*prompt_ids, *response_ids, *self._cached(key, tail)]

    def _tail(self, new: Sequence[Message], tools: Sequence[dict[str, Any]]) -> str:
        """The template's text after an assistant turn for the ``new`` messages."""
        stand_in = [{"role": "user", "content": "?"}, {"role": "assistant", "content": self.MARK}]
        full = self._render(stand_in + [m.template(self.syntax) for m in new], tools)
        at = full.rfind(self.MARK)
        if at < 0:
            raise BadRequest("the chat template does not write an assistant's content as given")
        return full[at + len(self.MARK) :]


@dataclass
class Reply:
    """What the gateway answers for one sampled response."""

    content: str | None
    calls: list[Call] = field(default_factory=list)
    finish_reason: str = "stop"  # OpenAI's: stop, length or tool_calls
    parse_error: str = ""  # why text that tried to call a tool is not a call ("" otherwise)

    def message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.calls:
            msg["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": json.dumps(c.arguments,
                                                                      ensure_ascii=False)}}
                for c in self.calls
            ]  # fmt: skip
        return msg

    def normalised(self) -> Message:
        """The reply as the program sends it back (to recognise it in a later call)."""
        calls = tuple(
            (c.name, json.dumps(c.arguments, sort_keys=True, ensure_ascii=False))
            for c in self.calls
        )
        return Message("assistant", self.content or "", calls)


def _attempt(text: str, syntax: str) -> bool:
    """Whether ``text`` tried to call a tool (a malformed attempt is an invalid step)."""
    body = _THINK.sub("", text).strip()
    return "<tool_call>" in body if syntax == "hermes" else body.startswith(("{", "<|python_tag|>"))


def read_reply(
    text: str, finish_reason: str, tools: Sequence[dict[str, Any]], tool_choice: str, syntax: str
) -> Reply:
    """The reply to ``text`` (the sampled response, stop token removed): one tool call when it
    is one (read as :class:`ToolCallFormat` reads it; the name must be a declared tool and the
    arguments an object), else the text itself, with ``finish_reason`` as OpenAI sets it."""
    plain = Reply(text, [], "length" if finish_reason == "length" else "stop")
    if not tools or tool_choice == "none":
        return plain
    fmt = ToolCallFormat(syntax=syntax, tools=tuple(tools), think=True)
    found = fmt.read_call(text, finish_reason)
    names = {t["function"]["name"] for t in tools}
    if isinstance(found, tuple) and found[0] not in names:
        found = f"unknown tool {str(found[0])[:40]!r}"
    elif isinstance(found, tuple) and not isinstance(found[1], Mapping):
        found = "the tool call's arguments must be a JSON object"
    if isinstance(found, str):
        plain.parse_error = found if _attempt(text, syntax) else ""
        return plain
    name, args = found
    think = "".join(_THINK.findall(text)).strip()
    call = Call(f"call_{uuid.uuid4().hex[:24]}", name, dict(args))
    return Reply(think or None, [call], "tool_calls")
