"""agentrl envs served in OpenEnv's protocol: an OpenEnv ``Environment`` around any agentrl env.

:func:`create_openenv_app` builds OpenEnv's own server app (``create_fastapi_app``: the
``/ws`` session endpoint its clients use, plus ``/reset``, ``/step``, ``/state``, ``/schema``,
``/health``) around :class:`AgentrlEnvironment`, one agentrl env per session. An OpenEnv user
then trains on an agentrl env with ``GenericEnvClient(base_url=url)`` or any OpenEnv client:

- action: ``{"text": "<the action string>"}`` (:class:`AgentrlAction`);
- observation (:class:`AgentrlObservation`): ``text`` (the observation), ``reward``, ``done``
  (terminated or truncated), ``truncated``, and every agentrl info key as a field of its own
  (``state_key`` as a string); env-specific info keys in ``extra_info``;
- ``state()`` (:class:`AgentrlState`): ``episode_id``, ``step_count``, ``env_id``,
  ``task_id``, ``category``, ``state_key`` and ``expert_action`` (the env's expert move now;
  ``None`` for an env without an expert);
- reset: ``seed`` (an int >= 0) picks a task as ``env.reset(seed=...)`` does, ``task_id``
  replays a task; other keys are refused unless listed in ``reset_options`` (then passed as the
  agentrl reset's ``options``: a task a client writes costs what the client makes it cost);
- tools: an env that declares tools (``info["tools"]``) answers OpenEnv's MCP actions
  (``{"type": "list_tools"}``, ``{"type": "call_tool", "tool_name", "arguments"}``), so
  ``MCPToolClient`` plays it too; a call becomes the env's text action.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import uuid
from collections.abc import Sequence
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from openenv.core.env_server import (
    Action,
    Environment,
    Observation,
    State,
    create_fastapi_app,
)
from openenv.core.env_server.mcp_types import (
    CallToolObservation,
    ListToolsObservation,
    Tool,
    ToolError,
    ToolErrorType,
)
from openenv.core.env_server.types import ConcurrencyConfig, EnvironmentMetadata
from pydantic import Field, model_validator
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocketDisconnect

from ..base import INFO_KEYS
from ..registry import make, resolve_id
from ..tools import TOOL_ACTIONS_KEY, TOOLS_KEY, call_problem, call_to_action
from ..webguard import RequestGuard, allowed_hosts
from .mapping import key_text

__all__ = [
    "AgentrlAction",
    "AgentrlEnvironment",
    "AgentrlObservation",
    "AgentrlState",
    "create_openenv_app",
]

MAX_ACTION_CHARS = 100_000
#: Reset arguments every client may send; others only where ``reset_options`` lists them.
RESET_ARGUMENTS = ("seed", "episode_id", "task_id")
#: Seconds an OpenEnv session without a connection (``POST /mcp``) may stay idle.
SESSION_TIMEOUT = 600.0
#: The largest HTTP request body (bytes); WebSocket messages are capped by the CLI's uvicorn.
MAX_BODY = 1 * 2**20


class AgentrlAction(Action):
    """One agentrl action: the text a policy wrote (the env parses it; junk is an invalid
    action, never an error); or one of OpenEnv's MCP actions (``type`` ``list_tools`` /
    ``call_tool``) on an env that declares tools."""

    text: str | None = Field(
        default=None, max_length=MAX_ACTION_CHARS, description="the action text"
    )
    type: Literal["text", "list_tools", "call_tool"] = Field(
        default="text", description="text (the default), or an MCP action"
    )
    tool_name: str | None = Field(default=None, max_length=200, description="call_tool: the tool")
    arguments: dict[str, Any] = Field(default_factory=dict, description="call_tool: its arguments")

    @model_validator(mode="after")
    def _complete(self) -> AgentrlAction:
        if self.type == "text" and self.text is None:
            raise ValueError("a text action needs its text")
        if self.type == "call_tool" and not self.tool_name:
            raise ValueError("call_tool needs tool_name")
        return self


class AgentrlObservation(Observation):
    """An agentrl observation and its info keys (``done`` and ``reward`` come from the base)."""

    text: str = Field(default="", description="the observation text")
    instruction: str = Field(default="", description="the task in words")
    task_id: str = Field(default="", description="task identity; reset(task_id=...) replays it")
    category: str = Field(default="", description="the task's category")
    admissible_actions: list[str] | None = Field(
        default=None, description="valid actions now, or null where the action space is open"
    )
    state_key: str = Field(default="", description="identity of the true state")
    action_valid: bool = Field(default=True, description="whether the last action was valid")
    won: bool = Field(default=False, description="task solved")
    score: float = Field(default=0.0, ge=0.0, le=1.0, description="partial score in [0, 1]")
    milestones: list[str] = Field(default_factory=list, description="sub-goals reached, in order")
    truncated: bool = Field(default=False, description="the episode hit the env's step limit")
    extra_info: dict[str, Any] = Field(
        default_factory=dict, description="env-specific info keys (JSON values)"
    )


class AgentrlState(State):
    """``state()``: OpenEnv's episode bookkeeping plus the agentrl task and true-state identity."""

    env_id: str = ""
    task_id: str = ""
    category: str = ""
    state_key: str = ""
    expert_action: str | None = None


def _json_value(value: Any) -> Any:
    """``value`` if JSON can carry it (finite numbers), else its ``str``."""
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        return str(value)


class AgentrlEnvironment(Environment[AgentrlAction, AgentrlObservation, AgentrlState]):
    """One agentrl env (``envs.make(env_id, **kwargs)``) behind OpenEnv's ``Environment`` API.

    Each OpenEnv session gets its own instance (and env), so sessions are independent:
    ``SUPPORTS_CONCURRENT_SESSIONS`` is true.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(
        self,
        env_id: str,
        kwargs: dict[str, Any] | None = None,
        reset_options: Sequence[str] = (),
    ):
        super().__init__()
        self.env_id = resolve_id(env_id)
        self.env = make(self.env_id, **(kwargs or {}))
        self.reset_options = frozenset(reset_options)
        self._info: dict[str, Any] | None = None
        self._tools: tuple[list, dict] | None = None
        self._expert: str | None = None
        self._episode_id: str | None = None
        self._steps = 0
        self._done = False
        self._lock = threading.Lock()  # the /ws executor and POST /mcp may both reach the env
        self.mcp_client = _ToolCalls(self)  # OpenEnv's POST /mcp reads tools through this

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        **options: Any,
    ) -> AgentrlObservation:
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ValueError(f"seed must be an integer >= 0 or null, got {seed!r}")
        extra = sorted(set(options) - self.reset_options)
        if extra:
            raise ValueError(
                f"reset argument(s) {', '.join(map(repr, extra))} not allowed on this server "
                f"(allowed: seed, task_id{''.join(', ' + k for k in sorted(self.reset_options))}; "
                "a server takes client-written tasks only with --allow-reset-options)"
            )
        if task_id is not None:
            options["task_id"] = str(task_id)
        with self._lock:
            obs, info = self.env.reset(seed=seed, options=options or None)
        self._done = False
        self._episode_id = str(episode_id) if episode_id is not None else uuid.uuid4().hex
        self._steps = 0
        tools = info.get(TOOLS_KEY)
        self._tools = (tools, info.get(TOOL_ACTIONS_KEY) or {}) if isinstance(tools, list) else None
        return self._observation(obs, info, reward=None, done=False, truncated=False)

    def step(
        self, action: AgentrlAction, timeout_s: float | None = None, **kwargs: Any
    ) -> Observation:
        if self._info is None:
            raise RuntimeError("reset the environment before step")
        if action.type == "list_tools":
            return self._list_tools()
        text = action.text
        if action.type == "call_tool":
            text = self._tool_action(action)
            if isinstance(text, Observation):
                return text
        with self._lock:
            obs, reward, terminated, truncated, info = self.env.step(text)
        self._steps += 1
        cut = bool(truncated) and not terminated
        done = self._done = bool(terminated or truncated)
        out = self._observation(obs, info, reward=float(reward), done=done, truncated=cut)
        if action.type == "call_tool":
            meta = out.model_dump(exclude={"reward", "done", "metadata", "text"})
            return CallToolObservation(
                tool_name=action.tool_name, result=obs, reward=out.reward, done=done, metadata=meta
            )
        return out

    # -- MCP actions (OpenEnv's MCPToolClient) -------------------------------------------------
    def _list_tools(self) -> ListToolsObservation:
        tools = []
        for t in (self._tools or ([], {}))[0]:
            fn = t.get("function", {}) if isinstance(t, dict) else {}
            tools.append(
                Tool(
                    name=str(fn.get("name", "")),
                    description=str(fn.get("description", "")),
                    input_schema=dict(fn.get("parameters") or {"type": "object"}),
                )
            )
        return ListToolsObservation(tools=tools, done=False, reward=None)

    def _tool_action(self, action: AgentrlAction) -> str | Observation:
        """The env's text action for a tool call, or the error observation of a call that does
        not fit the env's tools (the env is not stepped)."""
        if self._tools is None:
            why = f"{self.env_id} declares no tools; send text actions"
            kind = ToolErrorType.TOOL_NOT_FOUND
        else:
            why = call_problem(self._tools[0], action.tool_name, action.arguments)
            kind = ToolErrorType.INVALID_ARGS
            if why is None:
                return call_to_action(action.tool_name, action.arguments, self._tools[1])
        return CallToolObservation(
            tool_name=str(action.tool_name),
            result=None,
            error=ToolError(error_type=kind, message=why),
            done=False,
            reward=None,
        )

    def _observation(
        self, obs: str, info: dict[str, Any], *, reward: float | None, done: bool, truncated: bool
    ) -> AgentrlObservation:
        self._info = info
        # computed here, in the session's worker thread: state() is read on the server's event
        # loop, where a slow expert would stall every session
        try:
            self._expert = None if done else self.env.expert_action()
        except Exception:  # noqa: BLE001 - no expert (NotImplementedError) or a failing one
            self._expert = None
        values = {k: info[k] for k in INFO_KEYS}
        values["state_key"] = key_text(values["state_key"])
        values["milestones"] = [str(m) for m in values["milestones"]]
        extra = {k: _json_value(v) for k, v in info.items() if k not in INFO_KEYS}
        return AgentrlObservation(
            text=obs,
            reward=reward,
            done=done,
            truncated=truncated,
            extra_info=extra,
            **values,
        )

    @property
    def state(self) -> AgentrlState:
        """The episode's identity and the expert's move now (computed after the last reset or
        step, off the event loop; it does not change the env)."""
        info = self._info
        if info is None:
            return AgentrlState(env_id=self.env_id)
        return AgentrlState(
            episode_id=self._episode_id,
            step_count=self._steps,
            env_id=self.env_id,
            task_id=info["task_id"],
            category=info["category"],
            state_key=key_text(info["state_key"]),
            expert_action=self._expert,
        )

    def get_metadata(self) -> EnvironmentMetadata:
        doc = (type(self.env).__doc__ or "").strip().split("\n\n")[0]
        return EnvironmentMetadata(
            name=self.env_id, description=" ".join(doc.split()) or f"agentrl env {self.env_id}"
        )

    def close(self) -> None:
        self.env.close()


class _ToolCalls:
    """The env's tools for OpenEnv's ``POST /mcp`` (``tools/list``, ``tools/call``: what
    ``MCPToolClient`` uses in openenv 0.10), in the shape OpenEnv's server reads from an
    environment's ``mcp_client``. A call steps the env (in a worker thread) and answers
    ``{"data": observation, "reward", "done", ...info}``; with no episode running (none yet,
    or the last one ended) it starts one first (``reset()`` without a seed: MCP has no reset)."""

    def __init__(self, owner: AgentrlEnvironment):
        self.owner = owner

    def is_connected(self) -> bool:
        return True

    async def __aenter__(self) -> _ToolCalls:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        return None

    async def list_tools(self) -> list[dict[str, Any]]:
        env = self.owner
        if env._info is None:
            await asyncio.to_thread(env.reset)
        return [
            {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
            for t in env._list_tools().tools
        ]

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> dict:
        env = self.owner
        action = AgentrlAction(type="call_tool", tool_name=name, arguments=dict(arguments or {}))
        if env._info is None or env._done:
            await asyncio.to_thread(env.reset)
        out = await asyncio.to_thread(env.step, action)
        if out.error is not None:
            raise ValueError(out.error.message)
        return {"data": out.result, "reward": out.reward, "done": out.done, **out.metadata}


class _QuietDisconnect:
    """ASGI middleware: a WebSocket session whose client has already gone ends quietly.

    openenv-core 0.3.0's ``/ws`` handler closes the socket after the client's ``close``
    message, when OpenEnv's own client has usually closed it already; the handler then raises
    ``WebSocketDisconnect`` and uvicorn logs a 60-line traceback per session. Nothing is left
    to tell that client, so the exception is dropped (HTTP requests are untouched).
    """

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            if scope["type"] != "websocket":
                raise


async def _stateless_step(request: Any) -> JSONResponse:
    """``POST /step`` without a session: OpenEnv builds a fresh env per stateless request, which
    has no episode to step; say so instead of a bare 500."""
    return JSONResponse(
        {
            "error": "stateless /step has no episode (each HTTP request gets a fresh env): play "
            "episodes over the /ws session that OpenEnv's clients open (GenericEnvClient)"
        },
        status_code=409,
    )


def create_openenv_app(
    env_id: str,
    kwargs: dict[str, Any] | None = None,
    *,
    max_sessions: int = 16,
    reset_options: Sequence[str] = (),
    hosts: Sequence[str] | None = None,
    session_timeout: float = SESSION_TIMEOUT,
    max_body: int = MAX_BODY,
) -> FastAPI:
    """OpenEnv's server app serving ``envs.make(env_id, **kwargs)``, up to ``max_sessions``
    concurrent sessions (one env each); ``app.state.env_id`` is the full env id.

    ``reset_options``: reset arguments besides ``seed`` and ``task_id`` a client may send
    (Sokoban's ``room``: none by default). ``hosts``: the Host names the app answers to
    (default: loopback; requests from web pages are refused). Sessions without a connection
    (``POST /mcp``) idle for ``session_timeout`` seconds are closed. Bodies over ``max_body``
    bytes are refused before they are read. One env is built first, so an unknown id or a bad
    kwarg raises here, not in a session.
    """
    if max_sessions < 1:
        raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
    kwargs = dict(kwargs or {})
    first = AgentrlEnvironment(env_id, kwargs)  # fail at start, with the env's own error
    first.close()
    factory = functools.partial(AgentrlEnvironment, first.env_id, kwargs, tuple(reset_options))
    concurrency = ConcurrencyConfig(
        max_concurrent_envs=max_sessions, session_timeout=session_timeout
    )
    app = create_fastapi_app(
        factory, AgentrlAction, AgentrlObservation, concurrency_config=concurrency
    )
    routes = app.router.routes
    for k, route in enumerate(routes):
        if isinstance(route, Route) and route.path == "/step" and "POST" in (route.methods or ()):
            routes[k] = Route("/step", _stateless_step, methods=["POST"])
    app.add_middleware(_QuietDisconnect)
    app.add_middleware(
        RequestGuard,
        hosts=allowed_hosts("127.0.0.1") if hosts is None else frozenset(hosts),
        max_body=max_body,
        name="agentrl.envs.openenv",
    )
    app.state.env_id = first.env_id
    return app
