"""``agentrl/OpenEnv-v0``: an environment served in OpenEnv's protocol, as an agentrl text env.

The env talks to the server through OpenEnv's own client (``GenericEnvClient(...).sync()``,
one WebSocket session per env) and reads the server's ``/schema`` once to choose the text
fields. The mapping rules are in ``mapping`` and docs/envs/openenv.md.
"""

from __future__ import annotations

import contextlib
import re
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
from openenv.core import GenericEnvClient

from ..base import TextEnv, make_info
from .mapping import AUTO, BadReply, InfoFields, derive_info, parse_action, pick_field
from .mapping import render_observation as render

__all__ = ["OpenEnvEnv", "OpenEnvServerError"]

#: How OpenEnv 0.3.0's client words an error reply: ``Server error: <message> (code: <CODE>)``.
_ERROR_CODE = re.compile(r"\(code: ([A-Za-z_.]+)\)\s*$")
#: Error codes meaning "this action does not fit the action schema": an invalid action.
_REJECTED_ACTION = {"VALIDATION_ERROR", "WSErrorCode.VALIDATION_ERROR"}


class OpenEnvServerError(RuntimeError):
    """The OpenEnv server failed: unreachable, timed out, closed the session, answered an error
    or sent a value that breaks the agentrl contract. The message names the server's URL."""


class _ErrorReply(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class OpenEnvEnv(TextEnv):
    """An OpenEnv environment (a server at ``url``) as an agentrl text environment.

    Args:
        url: the server's base URL (``http://host:port``; OpenEnv's client speaks WebSocket to
            ``/ws`` on it).
        observation_field: the observation field holding the text; ``"auto"``: ``text`` if the
            observation schema has it, else its only string field; ``None`` (or no such field):
            the whole observation as JSON.
        action_field: the action field the agent's text goes into; ``"auto"``: ``text`` if the
            action schema has it, else its only string field; ``None`` (or no such field): the
            agent writes the action as a JSON object of the action's fields.
        fields: overrides of where each agentrl info key is read (``{"score": "progress"}``;
            ``None`` to not read one), see :class:`~agentrl.envs.openenv.mapping.InfoFields`.
        instruction, category: the info values where the server has no such field.
        success_reward: without a ``won`` field, the episode is won when it ends (``done``)
            with a reward of at least this.
        invalid_reward: the reward of an invalid action (one that is not JSON in JSON mode, or
            that the server rejects as not fitting the action schema).
        max_steps: truncate the episode after this many steps (``None``: only the server ends
            episodes).
        use_state: read ``state()`` after each reset and step when the observation lacks
            ``task_id`` or ``state_key`` (one more round trip per step).
        expert_field: the ``state()`` field holding an expert's next action (``None``: no
            expert).
        task_id_field: the reset argument a task id is sent as (``None``: only ``"seed:N"``
            task ids, which reset with seed N, can be replayed).
        splits: task ids per split for :meth:`task_ids` (OpenEnv has no task listing).
        connect_timeout, message_timeout: seconds to connect, and to wait for each reply.
        null_reward: the reward of a step the server answers with ``reward: null`` (some envs
            have reward-less steps); ``None``: such a step is an error (a NaN reward reaches
            the client as null, and must not pass as 0.0).
        seeded: whether the server's reset takes ``seed``; ``None``: checked on the first
            seeded reset (OpenEnv drops reset arguments an env does not declare, silently:
            the ``episode_id`` sent with the seed must come back in ``state()``); where it
            does not, seeds are still sent but no ``"seed:N"`` task id is claimed, with a
            warning.

    A server field named like an agentrl info key that does not fit it (a ``score`` of 0-100)
    is read as another meaning: the key's fallback applies, the value is kept as
    ``info["openenv_<key>"]`` and a warning says so once; a field named in ``fields`` must fit.
    An observation longer than the observation space (``max_text_length`` characters) is cut
    to fit, its full length in ``info["openenv_observation_chars"]``.
    """

    def __init__(
        self,
        url: str,
        *,
        observation_field: str | None = AUTO,
        action_field: str | None = AUTO,
        fields: Mapping[str, str | None] | None = None,
        instruction: str = "",
        category: str = "openenv",
        success_reward: float = 1.0,
        invalid_reward: float = 0.0,
        max_steps: int | None = None,
        use_state: bool = True,
        expert_field: str | None = "expert_action",
        task_id_field: str | None = "task_id",
        splits: Mapping[str, Sequence[str]] | None = None,
        connect_timeout: float = 10.0,
        message_timeout: float = 60.0,
        null_reward: float | None = None,
        seeded: bool | None = None,
        render_mode: str | None = None,
        max_text_length: int = 100_000,
    ):
        super().__init__(render_mode, max_text_length=max_text_length)
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be an http:// or https:// URL, got {url!r}")
        if max_steps is not None and int(max_steps) < 1:
            raise ValueError(f"max_steps must be >= 1 or None, got {max_steps}")
        self.url = url.rstrip("/")
        self.fields = InfoFields.with_overrides(fields)
        self.instruction, self.category = str(instruction), str(category)
        self.success_reward, self.invalid_reward = float(success_reward), float(invalid_reward)
        self.max_steps = None if max_steps is None else int(max_steps)
        self.use_state, self.expert_field, self.task_id_field = (
            use_state,
            expert_field,
            task_id_field,
        )
        self.splits = {k: [str(t) for t in v] for k, v in (splits or {}).items()}
        self.connect_timeout, self.message_timeout = float(connect_timeout), float(message_timeout)
        self.null_reward = None if null_reward is None else float(null_reward)
        self.seeded = seeded
        self._warned: set[str] = set()
        schema = self._schema()
        self.action_field = self._field(action_field, schema.get("action") or {}, "action")
        self.observation_field = self._field(
            observation_field, schema.get("observation") or {}, "observation"
        )
        self._client: Any = None
        self._fresh = False  # the session was just opened and has answered nothing yet
        self._text: str | None = None
        self._info: dict[str, Any] | None = None
        self._steps = 0
        self._ended = (False, False)  # (terminated, truncated) of the last reply
        self._fallback_task_id = ""

    # -- set-up --------------------------------------------------------------------------------
    def _schema(self) -> dict[str, Any]:
        """The server's ``/schema`` (action, observation and state JSON schemas)."""
        try:
            reply = httpx.get(f"{self.url}/schema", timeout=self.connect_timeout)
            reply.raise_for_status()
            schema = reply.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise OpenEnvServerError(
                f"OpenEnv server at {self.url}: cannot read /schema "
                f"({type(exc).__name__}: {exc}); is an OpenEnv server running there?"
            ) from exc
        if not isinstance(schema, dict):
            raise OpenEnvServerError(f"OpenEnv server at {self.url}: /schema is not a JSON object")
        return schema

    def _field(self, setting: str | None, schema: dict[str, Any], kind: str) -> str | None:
        skip = ("done", "reward") if kind == "observation" else ()
        try:
            return pick_field(setting, schema, kind=f"{kind} of {self.url}", skip=skip)
        except ValueError as exc:
            raise ValueError(f"{kind}_field: {exc}") from exc

    # -- transport -----------------------------------------------------------------------------
    def _call(self, what: str, fn: Callable[[Any], Any]) -> Any:
        """``fn(client)`` on the open session; an error reply raises :class:`_ErrorReply` (the
        session is still usable), anything else :class:`OpenEnvServerError` (and the session is
        dropped: a late reply would answer the next request)."""
        if self._client is None:
            client = GenericEnvClient(
                base_url=self.url,
                connect_timeout_s=self.connect_timeout,
                message_timeout_s=self.message_timeout,
            ).sync()
            try:
                client.connect()
            except Exception as exc:  # noqa: BLE001 - any failure to connect, named
                client.close()
                raise OpenEnvServerError(
                    f"OpenEnv server at {self.url}: cannot open a session: {exc}"
                ) from exc
            self._client, self._fresh = client, True
        try:
            out = fn(self._client)
            self._fresh = False
            return out
        except RuntimeError as exc:
            match = _ERROR_CODE.search(str(exc))
            if match and match.group(1) == "CAPACITY_REACHED":  # no session was opened
                self._drop()
                raise OpenEnvServerError(
                    f"OpenEnv server at {self.url}: {what} failed: {exc} (are all its sessions "
                    "in use?)"
                ) from exc
            if match and str(exc).startswith("Server error"):
                raise _ErrorReply(match.group(1), str(exc)) from exc
            self._drop()
            raise OpenEnvServerError(f"OpenEnv server at {self.url}: {what} failed: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - timeouts, closed connections, bad JSON
            self._drop()
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if isinstance(exc, TimeoutError):
                detail = f"no reply within {self.message_timeout:g} s"
            elif self._fresh_failed(exc):
                detail += " (it closed the new session at once: are all its sessions in use?)"
            raise OpenEnvServerError(
                f"OpenEnv server at {self.url}: {what} failed: {detail}"
            ) from exc

    def _request(self, what: str, fn: Callable[[Any], Any]) -> Any:
        try:
            return self._call(what, fn)
        except _ErrorReply as exc:
            raise OpenEnvServerError(f"OpenEnv server at {self.url}: {what}: {exc}") from exc

    def _fresh_failed(self, exc: Exception) -> bool:
        fresh, self._fresh = self._fresh, False
        return fresh and "ConnectionClosed" in type(exc).__name__

    def _drop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):  # closing a broken session: best effort
                client.close()

    def _state(self) -> dict[str, Any]:
        state = self._request("state()", lambda c: c.state())
        if not isinstance(state, dict):
            raise OpenEnvServerError(f"OpenEnv server at {self.url}: state() is not an object")
        return state

    # -- gymnasium API -------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        data: dict[str, Any] = dict(options or {})
        task_id = data.pop("task_id", None)
        if seed is not None:
            data["seed"] = int(seed)
        if task_id is not None:
            task_id = str(task_id)
            if task_id.startswith("seed:") and task_id[5:].isdigit():
                data["seed"] = int(task_id[5:])
            elif self.task_id_field is not None:
                data[self.task_id_field] = task_id
            else:
                raise ValueError(
                    f"task {task_id!r}: this OpenEnv env replays only 'seed:N' task ids "
                    "(set task_id_field to the server's reset argument for task ids)"
                )
        self._fallback_task_id = f"seed:{data['seed']}" if "seed" in data else ""
        self._sent_episode = None
        if "seed" in data and self.seeded is None:  # its echo tells whether reset takes seed
            self._sent_episode = data["episode_id"] = uuid.uuid4().hex
        result = self._request("reset", lambda c: c.reset(**data))
        self._steps = 0
        obs, info = self._apply(result)
        if task_id is not None and info["task_id"] != task_id:
            raise OpenEnvServerError(
                f"OpenEnv server at {self.url}: reset with task {task_id!r} started task "
                f"{info['task_id']!r}; does its reset take {self.task_id_field!r}?"
            )
        return obs, info

    def step(self, action: str):
        if self._info is None:
            raise RuntimeError("call reset() before step()")
        if self._client is None:  # dropped after a failure: its episode is gone with it
            raise OpenEnvServerError(
                f"OpenEnv server at {self.url}: the session of this episode was lost; reset "
                "to open a new one"
            )
        self._steps += 1
        payload = parse_action(action, self.action_field)
        if payload is None:
            return self._invalid()
        try:
            result = self._call("step", lambda c: c.step(payload))
        except _ErrorReply as exc:
            if exc.code in _REJECTED_ACTION:
                return self._invalid()
            raise OpenEnvServerError(f"OpenEnv server at {self.url}: step: {exc}") from exc
        obs, info = self._apply(result)
        if result.reward is None and self.null_reward is None:
            raise OpenEnvServerError(
                f"OpenEnv server at {self.url}: step answered reward null (a NaN reward is sent "
                "as null); pass null_reward=0.0 if this env has reward-less steps"
            )
        reward = float(result.reward) if result.reward is not None else self.null_reward
        terminated, truncated = self._ended
        return obs, reward, terminated, truncated, info

    def _invalid(self):
        """An action the env cannot take: same state, ``action_valid=False``, the penalty."""
        info = {**self._info, "action_valid": False, "openenv_reward": None}
        self._info = info
        truncated = self.max_steps is not None and self._steps >= self.max_steps
        return self._text, self.invalid_reward, False, truncated, info

    def _apply(self, result: Any) -> tuple[str, dict[str, Any]]:
        """Derive the observation text and info from a reset/step reply (and ``state()`` where
        needed), and keep them as the current ones."""
        observation = result.observation
        if not isinstance(observation, dict):
            raise OpenEnvServerError(
                f"OpenEnv server at {self.url}: the observation is not an object"
            )
        state = None
        f = self.fields
        if self.use_state and any(
            name is not None and name not in observation for name in (f.task_id, f.state_key)
        ):
            state = self._state()
        try:
            text = render(observation, self.observation_field)
            derived = derive_info(
                observation,
                state,
                reward=result.reward,
                done=bool(result.done),
                fields=f,
                instruction=self.instruction,
                category=self.category,
                fallback_task_id=self._fallback_task_id,
                success_reward=self.success_reward,
            )
        except (KeyError, BadReply) as exc:
            raise OpenEnvServerError(f"OpenEnv server at {self.url}: {exc}") from exc
        values = derived.values
        extra = {
            k: v for k, v in derived.extra.items() if k not in values and k != "openenv_reward"
        }
        for key, value in derived.foreign.items():
            extra[f"openenv_{key}"] = value
            self._warn_once(
                key,
                f"OpenEnv server at {self.url}: its field {key!r} ({value!r:.40}) is not agentrl's "
                f"{key}; it is kept as info['openenv_{key}'] (map another field with "
                f"fields={{{key!r}: ...}})",
            )
        if state is not None and getattr(self, "_sent_episode", None) is not None:
            echoed = state.get("episode_id")
            if echoed != self._sent_episode and values["task_id"] == self._fallback_task_id:
                values["task_id"] = ""  # the seed may not have reached the env: claim no task
                self._warn_once(
                    "seed",
                    f"OpenEnv server at {self.url}: its reset did not take the episode_id sent "
                    "with the seed (OpenEnv drops reset arguments an env does not declare), so "
                    "the seed may be dropped too: no 'seed:N' task id is claimed (pass "
                    "seeded=True if its reset takes seed)",
                )
            self._sent_episode = None
        limit = self.observation_space.max_length  # the observation space's limit
        if len(text) > limit:
            extra["openenv_observation_chars"] = len(text)
            text = text[:limit]
        info = make_info(**values, **extra, openenv_reward=result.reward)
        limit = self.max_steps is not None and self._steps >= self.max_steps
        self._ended = (derived.terminated, derived.truncated or (limit and not derived.terminated))
        self._text, self._info = text, info
        return text, info

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, stacklevel=3)

    # -- agentrl API ---------------------------------------------------------------------------
    def expert_action(self) -> str:
        """The server's expert move, from ``state()[expert_field]``."""
        if self._info is None:
            raise RuntimeError("call reset() before expert_action()")
        if self.expert_field is None:
            raise NotImplementedError("this OpenEnv env has no expert (expert_field=None)")
        action = self._state().get(self.expert_field)
        if not isinstance(action, str):
            raise NotImplementedError(
                f"the OpenEnv server at {self.url} offers no expert "
                f"(state() has no string {self.expert_field!r})"
            )
        return action

    def task_ids(self, split: str, limit: int | None = None) -> list[str]:
        """The ids given in ``splits`` (OpenEnv servers list no tasks)."""
        if not self.splits:
            raise NotImplementedError("OpenEnv servers list no task ids; pass splits={...}")
        if split not in self.splits:
            raise ValueError(f"no split {split!r}; splits: {', '.join(self.splits)}")
        ids = self.splits[split]
        return list(ids if limit is None else ids[: int(limit)])

    def current_observation(self) -> str:
        if self._text is None:
            raise RuntimeError("call reset() first")
        return self._text

    def close(self) -> None:
        """End the server session (the server frees its env)."""
        self._drop()
        super().close()

    def __del__(self) -> None:
        # An env dropped without close() still frees its server session (and the client's
        # event-loop thread, which would otherwise keep the session open).
        with contextlib.suppress(Exception):
            self._drop()
