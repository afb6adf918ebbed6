"""OpenEnv values <-> agentrl text and info keys: pure functions, no network.

OpenEnv observations and actions are JSON objects (pydantic models on the server) and its
``state()`` is one more; agentrl envs speak text plus the info keys of ``envs.base``. These
functions do the conversion both ways, so the adapter (``client``) and its tests share one
definition of every rule (docs/envs/openenv.md, "Field mapping").
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AUTO",
    "Derived",
    "InfoFields",
    "derive_info",
    "key_text",
    "parse_action",
    "pick_field",
    "render_observation",
]

#: Field setting meaning "choose from the server's JSON schema" (see :func:`pick_field`).
AUTO = "auto"

#: State fields that change on every call and say nothing about the env's state.
_STATE_BOOKKEEPING = ("episode_id", "step_count")


def _string_properties(schema: Mapping[str, Any]) -> list[str]:
    props = schema.get("properties") or {}
    return [
        name
        for name, spec in props.items()
        if name != "metadata" and isinstance(spec, dict) and spec.get("type") == "string"
    ]


def pick_field(
    setting: str | None, schema: Mapping[str, Any], *, kind: str, skip: Sequence[str] = ()
) -> str | None:
    """The field of an action or observation ``schema`` that carries text, from ``setting``.

    ``None``: no field (actions are JSON objects / observations rendered as JSON); ``"auto"``:
    a property named ``text`` if the schema has one, else its only string property (``metadata``
    and ``skip`` aside), else ``None``; any other name must be a property of the schema
    (``ValueError`` naming the properties otherwise).
    """
    props = schema.get("properties") or {}
    if setting is None:
        return None
    if setting == AUTO:
        if "text" in props:
            return "text"
        strings = [p for p in _string_properties(schema) if p not in skip]
        return strings[0] if len(strings) == 1 else None
    if setting not in props:
        names = ", ".join(sorted(p for p in props if p not in skip)) or "none"
        raise ValueError(f"the {kind} has no field {setting!r} (its fields: {names})")
    return setting


def render_observation(observation: Mapping[str, Any], text_field: str | None) -> str:
    """The observation text: ``observation[text_field]`` (a non-string value as JSON), or the
    whole observation as JSON with sorted keys when ``text_field`` is ``None``."""
    if text_field is None:
        return json.dumps(observation, sort_keys=True, ensure_ascii=False)
    if text_field not in observation:
        raise KeyError(f"the observation has no field {text_field!r}")
    value = observation[text_field]
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def parse_action(text: Any, action_field: str | None) -> dict[str, Any] | None:
    """The OpenEnv action for an agentrl action string, or ``None`` when it cannot be one.

    With ``action_field`` the action is ``{action_field: text}``; without, ``text`` must be a
    JSON object (the action's fields). Anything else (not a string, not JSON, not an object)
    is an invalid action, never an exception.
    """
    if not isinstance(text, str):
        return None
    if action_field is not None:
        return {action_field: text}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def key_text(key: Hashable) -> str:
    """A ``state_key`` as a string for the wire: strings as they are, anything else as JSON
    (tuples become lists), falling back to ``repr``."""
    if isinstance(key, str):
        return key
    try:
        return json.dumps(key, sort_keys=True)
    except (TypeError, ValueError):
        return repr(key)


@dataclass(frozen=True)
class InfoFields:
    """Where the adapter reads each agentrl info key: the OpenEnv field name, looked up in the
    observation first, then in ``state()``; ``None`` never reads it (the fallback applies).

    ``truncated`` (a boolean field: the episode ended by a step limit, not by its outcome) and
    ``extra_info`` (a dict merged into info) are read from the observation only.
    """

    instruction: str | None = "instruction"
    task_id: str | None = "task_id"
    category: str | None = "category"
    admissible_actions: str | None = "admissible_actions"
    state_key: str | None = "state_key"
    action_valid: str | None = "action_valid"
    won: str | None = "won"
    score: str | None = "score"
    milestones: str | None = "milestones"
    truncated: str | None = "truncated"
    extra_info: str | None = "extra_info"
    #: the keys whose field the user named (a value that cannot be the key is then an error;
    #: a same-named field of the server that means something else is set aside instead)
    explicit: frozenset[str] = frozenset()

    @classmethod
    def with_overrides(cls, overrides: Mapping[str, str | None] | None) -> InfoFields:
        overrides = dict(overrides or {})
        known = set(cls.__dataclass_fields__) - {"explicit"}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(
                f"fields: unknown info key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})"
            )
        bad = [k for k, v in overrides.items() if v is not None and not isinstance(v, str)]
        if bad:
            raise ValueError(f"fields: {', '.join(bad)} must map to a field name or None")
        return cls(**overrides, explicit=frozenset(overrides))


@dataclass(frozen=True)
class Derived:
    """What one OpenEnv reply means to agentrl: the info dict's values and the episode's end."""

    values: dict[str, Any]
    terminated: bool
    truncated: bool
    extra: dict[str, Any] = field(default_factory=dict)
    #: same-named fields that do not fit their agentrl key (``score`` of 57): key -> value
    foreign: dict[str, Any] = field(default_factory=dict)


class BadReply(ValueError):
    """A server value that cannot become the agentrl info key it is mapped to."""


def _lookup(name: str | None, *sources: Mapping[str, Any] | None) -> tuple[bool, Any]:
    if name is None:
        return False, None
    for src in sources:
        if src is not None and name in src and src[name] is not None:
            return True, src[name]
    return False, None


def _fingerprint(observation: Mapping[str, Any], state: Mapping[str, Any] | None) -> str:
    body = {"observation": observation}
    if state is not None:
        body["state"] = {k: v for k, v in state.items() if k not in _STATE_BOOKKEEPING}
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, default=repr)
    return "obs:" + hashlib.sha1(text.encode()).hexdigest()[:16]


def derive_info(
    observation: Mapping[str, Any],
    state: Mapping[str, Any] | None,
    *,
    reward: float | None,
    done: bool,
    fields: InfoFields,
    instruction: str,
    category: str,
    fallback_task_id: str,
    success_reward: float,
) -> Derived:
    """The agentrl info values for one OpenEnv reply (``observation`` dict, ``state()`` dict or
    ``None``, ``reward``, ``done``).

    Each key is read from its field (observation first, then state); where the server has no
    such field: ``instruction`` and ``category`` are the given defaults, ``task_id`` is
    ``fallback_task_id`` (``"seed:N"`` after a seeded reset), ``admissible_actions`` is
    ``None``, ``state_key`` is a hash of the observation (and of the state, bookkeeping
    fields aside), ``action_valid`` is true, ``won`` is ``done and reward >= success_reward``,
    ``score`` is 1.0 when won else 0.0, ``milestones`` is empty. A field whose value cannot be
    the key (``score`` outside [0, 1], a non-boolean ``won``) raises :class:`BadReply` where
    the user mapped it (``fields``); a same-named field of the server is another meaning of the
    name: the fallback applies and the value is returned in ``Derived.foreign``.
    """
    out: dict[str, Any] = {}
    for key, default in (("instruction", instruction), ("category", category)):
        found, value = _lookup(getattr(fields, key), observation, state)
        out[key] = str(value) if found else default
    found, value = _lookup(fields.task_id, observation, state)
    out["task_id"] = str(value) if found else fallback_task_id

    foreign: dict[str, Any] = {}

    def fits(key: str, found: bool, value: Any, problem: str | None) -> bool:
        """Whether a found field is read as ``key``; one that does not fit is an error where
        the user named it, else it is set aside as another meaning of the same name."""
        if not found or problem is None:
            return found
        if key in fields.explicit:
            raise BadReply(problem)
        foreign[key] = value
        return False

    found, value = _lookup(fields.admissible_actions, observation, state)
    bad = not isinstance(value, list) or not all(isinstance(a, str) for a in value)
    why = f"admissible_actions must be a list of strings, got {value!r:.80}" if bad else None
    out["admissible_actions"] = (
        list(value) if fits("admissible_actions", found, value, why) else None
    )

    found, value = _lookup(fields.state_key, observation, state)
    out["state_key"] = key_text(value) if found else _fingerprint(observation, state)

    for key, default in (("action_valid", True), ("won", None)):
        found, value = _lookup(getattr(fields, key), observation, state)
        why = None if isinstance(value, bool) else f"{key} must be a boolean, got {value!r:.80}"
        out[key] = value if fits(key, found, value, why) else default
    if out["won"] is None:
        out["won"] = bool(done and reward is not None and reward >= success_reward)

    found, value = _lookup(fields.score, observation, state)
    why = None
    if isinstance(value, bool) or not isinstance(value, int | float):
        why = f"score must be a number, got {value!r:.80}"
    elif not (math.isfinite(value) and 0.0 <= value <= 1.0):
        why = f"score must lie in [0, 1], got {value!r}"
    out["score"] = (
        float(value) if fits("score", found, value, why) else (1.0 if out["won"] else 0.0)
    )

    found, value = _lookup(fields.milestones, observation, state)
    why = None if isinstance(value, list) else f"milestones must be a list, got {value!r:.80}"
    out["milestones"] = (
        tuple(str(m) for m in value) if fits("milestones", found, value, why) else ()
    )

    found, value = _lookup(fields.truncated, observation)
    cut = bool(done and found and value is True)
    found, extra = _lookup(fields.extra_info, observation)
    extra = dict(extra) if found and isinstance(extra, dict) else {}
    return Derived(
        out, terminated=bool(done) and not cut, truncated=cut, extra=extra, foreign=foreign
    )
