"""Agents behind an OpenAI-compatible endpoint: a served training run, or any chat model.

``agent=endpoint agent.path=RUN`` (a training run served by ``python -m agentrl.serve RUN``) is
the model agent with generation over the wire: its settings are the run's, read by
:func:`agentrl.evaluation.model_agent.resolve_model_settings` (hand settings override and are
reported), and its episodes play through the trainer's runner
(:class:`~agentrl.evaluation.model_agent.ModelAgent`) with a
:class:`~agentrl.backends.remote.CompletionsBackend`: the prompt token ids, stop tokens, token cap,
trie-constrained decoding and parser are the trainer's, so greedy decoding chooses what the
in-process model chooses (docs/evaluation.md measures it). See :func:`served_run_agent`.

Without ``agent.path`` (a hosted model, a server of a model agentrl did not train), the
:class:`EndpointAgent` below talks chat completions. Each step sends one chat-completions request per live episode (concurrently, up to
``concurrency`` at once). The messages come from ``messages_fn(episode)``, the trainer's prompt
builder (:class:`agentrl.rollout.PromptBuilder`) when built from a config, and the action is
read from the reply by ``parse_fn(text)``, the trainer's parser (:class:`agentrl.rollout.
ActionFormat`): the model sees what it saw in training. A reply with no parseable action sends
an empty action to the env and counts as invalid, as in training.

``constrain=True`` (vLLM servers) restricts each reply to the admissible actions written in the
response template, through vLLM's ``structured_outputs={"choice": [...]}``: the endpoint
counterpart of the trainer's constrained decoding. (vLLM's grammar admits every tokenisation of
a choice, the trainer's trie only the canonical one; the set of texts is the same, but a reply
may take up to one token per character: leave ``max_tokens`` that much room.) States whose
actions are open or templated (``search[<your query>]``) are generated freely.

``native_tools=True`` (``agent.native_tools=true``): an episode whose env declares tools (its reset
info's ``tools``, OpenAI function schemas; docs/envs/contract.md) plays with the server's own tool
calling: each request carries ``tools=[...]``, the action is read from the reply's
``message.tool_calls`` (function name and JSON arguments) and mapped to the env's command by the
tool-call format (:meth:`agentrl.rollout.ToolCallFormat.parse_call`, the mapping training uses),
and the next observation goes back as a ``role: tool`` message with that call's
``tool_call_id``. A reply without a call, with several, or with a call the tools do not admit
(unknown tool, arguments that are not JSON or do not fit the schema) is an invalid step: the env
gets an empty action and the next observation comes as a ``user`` message that says what was
wrong. The server must parse the model's calls (vLLM: ``--enable-auto-tool-choice
--tool-call-parser hermes``, or ``llama3_json`` with ``agent.tool_syntax=llama3_json``;
``python -m agentrl.serve`` adds them for tool-call runs). The reply is judged by the
in-process rules wherever it shows what they judge (:func:`read_native`); what the server's
parser drops is listed in docs/envs/contract.md. Envs without tools play as text.

Reproducibility: ``temperature`` defaults to 0 and every request carries a ``seed`` derived from
the episode's agent seed and the step index, which vLLM honours for sampled decoding.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ..backends.remote import CompletionsBackend, EndpointError, quiet_http_logs
from ..episodes import Episode
from ..pool import EnvPool
from ..rollout import ActionFormat, PromptBuilder, PromptConfig
from ..rollout.parse import ParsedAction
from ..rollout.tools import ToolCallFormat, render_call
from .model_agent import ModelAgent, _seed, resolve_model_settings
from .runner import Action
from .tasks import derive_seed

__all__ = ["EndpointAgent", "EndpointError", "read_native", "served_run_agent"]

Messages = list[dict[str, Any]]
_PLACEHOLDER = re.compile(r"<[^<>]*>")


class _Call:
    """One native step of an episode: the call the server returned (``name``/``arguments``, its
    ``call_id``), or why no call could be used (``reason``), and the reply's text."""

    __slots__ = ("call_id", "name", "arguments", "reason", "content")

    def __init__(self, call_id="", name="", arguments="", reason="", content=""):
        self.call_id, self.name, self.arguments = call_id, name, arguments
        self.reason, self.content = reason, content


def native_messages(messages: Messages, calls: Sequence[_Call]) -> Messages:
    """``messages`` (the prompt builder's, observations after the first as ``tool`` messages,
    one assistant message per past turn) with each past turn written as OpenAI tool calling
    writes it: a used call as the assistant's ``tool_calls`` and the observation after it as the
    ``tool`` message answering its ``tool_call_id``; an unusable reply as its text, the
    observation after it as a ``user`` message saying what was wrong. ``calls``: the shown
    turns' calls, in order."""
    out: Messages = []
    turn, pending = 0, None
    for m in messages:
        m = dict(m)
        if m["role"] == "assistant" and turn < len(calls):
            pending = calls[turn]
            turn += 1
            if not pending.reason:
                m = {
                    "role": "assistant",
                    "content": pending.content or None,
                    "tool_calls": [
                        {
                            "id": pending.call_id,
                            "type": "function",
                            "function": {"name": pending.name, "arguments": pending.arguments},
                        }
                    ],
                }
            else:
                m = {"role": "assistant", "content": pending.content}
        elif m["role"] == "tool" and pending is not None:
            if pending.reason:
                note = f"\nYour last tool call was invalid: {pending.reason}."
                m = {"role": "user", "content": m["content"] + note}
            else:
                m["tool_call_id"] = pending.call_id
            pending = None
        out.append(m)
    return out


def read_native(
    fmt: ToolCallFormat, content: str | None, calls: Sequence[tuple[Any, Any]]
) -> ParsedAction:
    """The env action of a native reply, or why there is none: ``content`` is the reply's text
    and ``calls`` its ``tool_calls`` as ``(name, arguments)`` (the server's tool parser split
    them). The rules are the in-process parser's (:meth:`ToolCallFormat.parse`) wherever the
    reply shows what it judges: no call (the text's own reason, the in-process one), several
    calls, text before the call, arguments and their schema. What the server's parser drops
    (text after a call, an unclosed tag, keys beside the name and the arguments) never reaches
    this function: docs/envs/contract.md lists those cases."""
    text = content or ""
    if not calls:
        in_text = fmt.parse(text)
        if in_text.action is None:
            return in_text  # the in-process reason: the server found no call, nor would we
        return ParsedAction(
            None,
            "the reply's text holds a well-formed tool call but the server returned no "
            "tool_calls: it parses none (vLLM: --enable-auto-tool-choice --tool-call-parser "
            f"{fmt.syntax})",
        )
    if len(calls) > 1:
        return ParsedAction(None, f"{len(calls)} tool calls; one is allowed per turn")
    beside = fmt.beside_call(text)
    if beside:
        return ParsedAction(None, beside)
    name, arguments = calls[0]
    return fmt.parse_call(name, arguments if arguments is not None else {})


#: ``agent=endpoint`` keys and the ``agent=model`` settings they are (the run's, by default).
_AS_MODEL = {
    "prompt": "prompt",
    "action_format": "action",
    "max_tokens": "max_new_tokens",
    "constrain": "constrained",
    "credit": "credit",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
}


def _same_folder(a: str, b: str) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return a == b


def served_run_agent(c: dict[str, Any], cfg: Any = None) -> ModelAgent:
    """``agent=endpoint agent.path=RUN``: the model agent of ``RUN`` generating with the server
    at ``agent.base_url`` (``agent.model``: its served name; null: the one model it serves).

    The settings are the run's (:func:`~agentrl.evaluation.model_agent.resolve_model_settings`),
    overridden by ``agent.prompt``, ``agent.action_format``, ``agent.max_tokens``,
    ``agent.constrain``, ``agent.credit`` and the sampling keys; overrides that differ from the
    run, and a server that serves another folder than the run's checkpoint, are reported in one
    line (and in the results' ``mismatches``)."""
    settings = resolve_model_settings(
        {mine: _set(c.get(key)) for key, mine in _AS_MODEL.items()} | {"path": c["path"]},
        agent="endpoint",
        run_scalars=("max_new_tokens", "constrained", "credit"),
    )
    backend = CompletionsBackend(
        str(c.get("base_url") or ""),
        c.get("model") or None,
        api_key=c.get("api_key") or "EMPTY",
        concurrency=int(c.get("concurrency") or 16),
        timeout=float(c.get("timeout") or 60.0),
        max_retries=int(c.get("max_retries") if c.get("max_retries") is not None else 2),
        extra_body=c.get("extra_body"),
    )
    root = backend.card.get("root")
    from_run = (Path(settings.source) / "config.yaml").is_file()
    if from_run and root and not _same_folder(root, settings.model):
        settings.mismatches.append(
            f"served model {backend.model!r} is {root} (the run's: {settings.model})"
        )
    try:
        return ModelAgent(settings, seed=_seed(cfg), backend=backend, name="endpoint")
    except Exception:
        backend.close()
        raise


class EndpointAgent:
    """Chat-completions agent.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model name.
        messages_fn: ``episode -> [{"role": ..., "content": ...}, ...]``.
        parse_fn: ``reply text -> action`` or ``None`` when the reply holds no action.
        api_key: sent as a bearer token (``"EMPTY"`` for a local vLLM server).
        temperature, top_p, max_tokens: sampling settings of every request.
        concurrency: requests in flight at once.
        timeout: seconds per request; max_retries: the client's retries on connection errors,
            429 and 5xx replies (with back-off).
        extra_body: extra JSON fields for the server (e.g. vLLM's ``{"top_k": 20}``).
        constrain: restrict replies to the admissible actions (vLLM's structured outputs),
            each written with ``render_fn(action)`` (default: ``<action>{action}</action>``).
        native_tools: play episodes whose env declares tools with the server's tool calling
            (see the module docstring); their messages come from ``tool_messages_fn(episode)``
            (default ``messages_fn``), observations after the first as ``tool`` messages, and
            calls are checked and mapped by ``tool_format`` (default: a hermes
            :class:`~agentrl.rollout.ToolCallFormat`; only its checks and mapping are used).
    """

    name = "endpoint"

    def __init__(
        self,
        base_url: str,
        model: str,
        messages_fn: Callable[[Episode], Messages],
        parse_fn: Callable[[str], str | None],
        *,
        api_key: str = "EMPTY",
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_tokens: int = 64,
        concurrency: int = 16,
        timeout: float = 60.0,
        max_retries: int = 2,
        extra_body: dict[str, Any] | None = None,
        constrain: bool = False,
        render_fn: Callable[[str], str] | None = None,
        native_tools: bool = False,
        tool_messages_fn: Callable[[Episode], Messages] | None = None,
        tool_format: ToolCallFormat | None = None,
    ):
        from openai import OpenAI

        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        self.base_url, self.model = base_url, model
        self.messages_fn, self.parse_fn = messages_fn, parse_fn
        self.temperature, self.top_p, self.max_tokens = (
            float(temperature),
            float(top_p),
            int(max_tokens),
        )
        self.extra_body = dict(extra_body or {})
        self.constrain = bool(constrain)
        self.render_fn = render_fn or (lambda action: f"<action>{action}</action>")
        self.native_tools = bool(native_tools)
        self.tool_messages_fn = tool_messages_fn or messages_fn
        self.tool_format = tool_format or ToolCallFormat()
        quiet_http_logs()
        self._client = OpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
        )
        self._executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="endpoint")
        self.requests = 0

    def _complete(
        self,
        messages: Messages,
        seed: int,
        choices: list[str] | None,
        tools: list[dict[str, Any]] | None = None,
    ) -> Any:
        """The reply's text, or with ``tools`` its message (``None``: no choice came back)."""
        import openai

        extra = dict(self.extra_body)
        if choices:
            extra["structured_outputs"] = {**extra.get("structured_outputs", {}), "choice": choices}
        more = {"tools": tools} if tools else {}
        try:
            reply = self._client.chat.completions.create(
                model=self.model,
                messages=messages,
                temperature=self.temperature,
                top_p=self.top_p,
                max_tokens=self.max_tokens,
                seed=seed,
                n=1,
                extra_body=extra or None,
                **more,
            )
        except openai.APIConnectionError as exc:
            raise EndpointError(f"endpoint {self.base_url} unreachable: {exc}") from exc
        except openai.APIStatusError as exc:
            raise EndpointError(
                f"endpoint {self.base_url} answered HTTP {exc.status_code}: {exc.message}"
            ) from exc
        if tools:
            return reply.choices[0].message if reply.choices else None
        if not reply.choices:
            return ""
        return reply.choices[0].message.content or ""

    def _choices(self, ep: Episode) -> list[str] | None:
        actions = ep.admissible_actions
        if not self.constrain or not actions or any(_PLACEHOLDER.search(a) for a in actions):
            return None
        return [self.render_fn(a) for a in actions]

    def _native(self, ep: Episode) -> ToolCallFormat | None:
        """The tool format bound to ``ep``'s tools when it plays natively, else ``None``."""
        if not self.native_tools or not ep.first_info.get("tools"):
            return None
        return self.tool_format.bind(ep.first_info)

    def _tool_job(self, ep: Episode, fmt: ToolCallFormat) -> tuple[Any, ...]:
        calls: list[_Call] = ep.memory if isinstance(ep.memory, list) else []
        ep.memory = calls
        messages = self.tool_messages_fn(ep)
        shown = sum(m["role"] == "assistant" for m in messages)
        seed = derive_seed(ep.task.agent_seed, ep.steps)
        shown_calls = calls[len(calls) - shown :] if shown else []
        messages = native_messages(messages, shown_calls)
        if calls and calls[-1].reason and not shown:  # no history shown: say it with this one
            note = f"\nYour last tool call was invalid: {calls[-1].reason}."
            messages[-1] = {**messages[-1], "content": messages[-1]["content"] + note}
        choices = None
        actions = ep.admissible_actions
        if self.constrain and actions and not any(_PLACEHOLDER.search(a) for a in actions):
            choices = [text for a in actions for text in fmt.renders(a)] or None
        return messages, seed, choices, fmt.prompt_tools

    def _read_call(self, ep: Episode, fmt: ToolCallFormat, message: Any) -> Action:
        """The env action of a native reply (an invalid one: an empty action, the reason kept
        for the next prompt), recorded in ``ep.memory``."""
        content = (getattr(message, "content", None) or "") if message is not None else ""
        tool_calls = list(getattr(message, "tool_calls", None) or []) if message else []
        call = _Call(content=content)
        step = len(ep.memory)
        pairs = [
            (getattr(fn, "name", ""), getattr(fn, "arguments", None))
            for fn in (getattr(c, "function", None) for c in tool_calls)
        ]
        parsed = (
            ParsedAction(None, "the server returned no reply")
            if message is None
            else read_native(fmt, content, pairs)
        )
        call.reason = parsed.reason
        if len(tool_calls) == 1 and message is not None:
            fn = getattr(tool_calls[0], "function", None)
            call.name = str(getattr(fn, "name", "") or "")
            raw = getattr(fn, "arguments", None)
            call.arguments = raw if isinstance(raw, str) else json.dumps(raw or {})
            call.call_id = str(getattr(tool_calls[0], "id", "") or f"call_{step}")
            if parsed.action is not None:
                ep.memory.append(call)
                try:
                    args = json.loads(call.arguments)
                except ValueError:
                    args = {}
                response = render_call(fmt.syntax, call.name, args)
                return Action(parsed.action, (content + response) if content else response, True)
        ep.memory.append(call)
        shown = [f"{c.function.name}({c.function.arguments})" for c in tool_calls if c.function]
        return Action("", content + (" " if content and shown else "") + " ".join(shown), False)

    def act(self, episodes: Sequence[Episode], pool: EnvPool) -> list[Action | str]:
        fmts = [self._native(ep) for ep in episodes]
        jobs = [
            self._tool_job(ep, fmt)
            if fmt is not None
            else (
                self.messages_fn(ep),
                derive_seed(ep.task.agent_seed, ep.steps),
                self._choices(ep),
            )
            for ep, fmt in zip(episodes, fmts, strict=True)
        ]
        replies = list(self._executor.map(lambda job: self._complete(*job), jobs))
        self.requests += len(replies)
        out: list[Action | str] = []
        for ep, fmt, reply in zip(episodes, fmts, replies, strict=True):
            if fmt is not None:
                out.append(self._read_call(ep, fmt, reply))
                continue
            action = self.parse_fn(reply)
            out.append(
                Action(action, reply, True) if action is not None else Action("", reply, False)
            )
        return out

    @classmethod
    def from_config(cls, agent_cfg: Any, cfg: Any = None) -> EndpointAgent | ModelAgent:
        """From ``configs/agent/endpoint.yaml``. With ``agent.path``: :func:`served_run_agent`.
        Else prompts and parsing by the trainer's :class:`~agentrl.rollout.PromptBuilder` and
        :class:`~agentrl.rollout.ActionFormat`, with the settings of ``agent.prompt`` and
        ``agent.action_format``, over chat completions."""
        c = (
            OmegaConf.to_container(agent_cfg, resolve=True)
            if not isinstance(agent_cfg, dict)
            else dict(agent_cfg)
        )
        if c.get("path"):
            if not c.get("base_url"):
                raise ValueError("agent=endpoint needs agent.base_url")
            return served_run_agent(c, cfg)
        prompt = PromptConfig(**_set(c.get("prompt") or {}))
        fmt = ActionFormat(**_set(c.get("action_format") or {}))
        builder = PromptBuilder(None, prompt)  # messages only: the server applies its chat template

        def shown(ep: Episode) -> list[Any]:
            turns = ep.own_history()  # the trainer's Turn: each shows its observation and response
            k = prompt.history
            return turns if k == -1 else (turns[-k:] if k > 0 else [])

        def messages_fn(ep: Episode) -> Messages:
            return builder.messages(
                ep.instruction, shown(ep), ep.observation, ep.admissible_actions
            )

        def tool_messages_fn(ep: Episode) -> Messages:
            return builder.messages(
                ep.instruction, shown(ep), ep.observation, ep.admissible_actions, role="tool"
            )

        settings = _set(c.get("action_format") or {})
        tool_fmt = ToolCallFormat(
            syntax=str(c.get("tool_syntax") or "hermes"),
            **{
                k: settings[k]
                for k in ("think", "require_think", "max_action_chars")
                if k in settings
            },
        )

        for key in ("base_url", "model"):
            if not c.get(key):
                raise ValueError(
                    f"agent=endpoint needs agent.{key} (or agent.path, a training run it serves)"
                )
        return cls(
            c["base_url"],
            c["model"],
            messages_fn,
            lambda text: fmt.parse(text).action,
            api_key=c.get("api_key") or "EMPTY",
            temperature=_given(c, "temperature", 0.0),
            top_p=_given(c, "top_p", 1.0),
            max_tokens=_given(c, "max_tokens", 64),
            concurrency=_given(c, "concurrency", 16),
            timeout=_given(c, "timeout", 60.0),
            max_retries=_given(c, "max_retries", 2),
            extra_body=c.get("extra_body"),
            constrain=_given(c, "constrain", False),
            render_fn=fmt.render,
            native_tools=bool(_given(c, "native_tools", False)),
            tool_messages_fn=tool_messages_fn,
            tool_format=tool_fmt,
        )

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self._client.close()


def _given(c: dict[str, Any], key: str, default: Any) -> Any:
    """``c[key]`` unless it is missing or null (the config's "the run's setting")."""
    value = c.get(key)
    return default if value is None else value


def _set(value: Any) -> Any:
    """A mapping without its null keys (the config lists keys to override as null), else as is."""
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if v is not None}
    return value
