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
  replays a task, other keys are passed as the agentrl reset's ``options``.
"""

from __future__ import annotations

import functools
import json
import uuid
from typing import Any

from fastapi import FastAPI
from openenv.core.env_server import (
    Action,
    Environment,
    Observation,
    State,
    create_fastapi_app,
)
from openenv.core.env_server.types import EnvironmentMetadata
from pydantic import Field
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocketDisconnect

from ..base import INFO_KEYS
from ..registry import make, resolve_id
from .mapping import key_text

__all__ = [
    "AgentrlAction",
    "AgentrlEnvironment",
    "AgentrlObservation",
    "AgentrlState",
    "create_openenv_app",
]

MAX_ACTION_CHARS = 100_000


class AgentrlAction(Action):
    """One agentrl action: the text a policy wrote (the env parses it; junk is an invalid
    action, never an error)."""

    text: str = Field(max_length=MAX_ACTION_CHARS, description="the action text")


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

    def __init__(self, env_id: str, kwargs: dict[str, Any] | None = None):
        super().__init__()
        self.env_id = resolve_id(env_id)
        self.env = make(self.env_id, **(kwargs or {}))
        self._info: dict[str, Any] | None = None
        self._episode_id: str | None = None
        self._steps = 0

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        **options: Any,
    ) -> AgentrlObservation:
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ValueError(f"seed must be an integer >= 0 or null, got {seed!r}")
        if task_id is not None:
            options["task_id"] = str(task_id)
        obs, info = self.env.reset(seed=seed, options=options or None)
        self._episode_id = str(episode_id) if episode_id is not None else uuid.uuid4().hex
        self._steps = 0
        return self._observation(obs, info, reward=None, done=False, truncated=False)

    def step(
        self, action: AgentrlAction, timeout_s: float | None = None, **kwargs: Any
    ) -> AgentrlObservation:
        if self._info is None:
            raise RuntimeError("reset the environment before step")
        obs, reward, terminated, truncated, info = self.env.step(action.text)
        self._steps += 1
        cut = bool(truncated) and not terminated
        done = bool(terminated or truncated)
        return self._observation(obs, info, reward=float(reward), done=done, truncated=cut)

    def _observation(
        self, obs: str, info: dict[str, Any], *, reward: float | None, done: bool, truncated: bool
    ) -> AgentrlObservation:
        self._info = info
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
        """The episode's identity; ``expert_action`` is computed when asked (it does not change
        the env)."""
        info = self._info
        if info is None:
            return AgentrlState(env_id=self.env_id)
        try:
            expert = self.env.expert_action()
        except NotImplementedError:
            expert = None
        return AgentrlState(
            episode_id=self._episode_id,
            step_count=self._steps,
            env_id=self.env_id,
            task_id=info["task_id"],
            category=info["category"],
            state_key=key_text(info["state_key"]),
            expert_action=expert,
        )

    def get_metadata(self) -> EnvironmentMetadata:
        doc = (type(self.env).__doc__ or "").strip().split("\n\n")[0]
        return EnvironmentMetadata(
            name=self.env_id, description=" ".join(doc.split()) or f"agentrl env {self.env_id}"
        )

    def close(self) -> None:
        self.env.close()


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


def create_openenv_app(
    env_id: str, kwargs: dict[str, Any] | None = None, *, max_sessions: int = 16
) -> FastAPI:
    """OpenEnv's server app serving ``envs.make(env_id, **kwargs)``, up to ``max_sessions``
    concurrent sessions (one env each); ``app.state.env_id`` is the full env id.

    One env is built first, so an unknown id or a bad kwarg raises here, not in a session.
    """
    if max_sessions < 1:
        raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
    kwargs = dict(kwargs or {})
    first = AgentrlEnvironment(env_id, kwargs)  # fail at start, with the env's own error
    first.close()
    factory = functools.partial(AgentrlEnvironment, first.env_id, kwargs)
    app = create_fastapi_app(
        factory, AgentrlAction, AgentrlObservation, max_concurrent_envs=max_sessions
    )
    app.add_middleware(_QuietDisconnect)
    app.state.env_id = first.env_id
    return app
