"""What an env must return, checked where its output enters the pool (every backend alike).

Pure functions: :func:`check_step` and :func:`check_reset` take what ``env.step``/``env.reset``
returned and give back the normalised result (``float`` reward, ``bool`` flags) or one line saying
what is wrong, which the pool turns into a cut episode (step) or a clear error (reset). The
``info`` keys the rollout loop reads are checked too, so a bad value is named here instead of
failing later in prompt building or credit.
"""

from __future__ import annotations

import hashlib
import math
import numbers
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "ERROR_KINDS",
    "Fault",
    "StepResult",
    "check_reset",
    "check_step",
    "digest",
]

#: Why a pool can end an episode (``info["error_kind"]``): the env's output was wrong
#: (``observation``, ``reward``, ``flag``, ``info``), it raised (``exception``), its result could
#: not be sent (``unpicklable``), its worker crashed (``crash``), hung past ``step_timeout``
#: (``timeout``) or went over ``worker_memory_mb`` (``memory``) while stepping it, its episode
#: could not be restored on a restarted worker (``replay``: the replay failed or diverged), or it
#: shared a restarted worker and is not replayable (``lost``).
ERROR_KINDS = (
    "observation",
    "reward",
    "flag",
    "info",
    "exception",
    "unpicklable",
    "crash",
    "timeout",
    "memory",
    "replay",
    "lost",
)


class StepResult(NamedTuple):
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class Fault(NamedTuple):
    """Why an env's operation failed: one of :data:`ERROR_KINDS` and the full text."""

    kind: str
    message: str


def _what(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def _is_flag(value: Any) -> bool:
    return type(value) is bool or isinstance(value, np.bool_)


def _check_info(info: Any) -> str | None:
    """``None`` when ``info`` is a dict whose loop-read keys have usable types; else why not."""
    if not isinstance(info, dict):
        return f"info is {_what(info)}, expected a dict"
    acts = info.get("admissible_actions")
    if acts is not None and not (
        isinstance(acts, list | tuple) and all(isinstance(a, str) for a in acts)
    ):
        return f"info['admissible_actions'] is {_what(acts)}, expected a list of str or None"
    ms = info.get("milestones", ())
    if ms is not None and not isinstance(ms, list | tuple):
        return f"info['milestones'] is {_what(ms)}, expected a tuple of str"
    try:
        hash(info.get("state_key"))
    except TypeError:
        return f"info['state_key'] is {_what(info['state_key'])}, expected a hashable value"
    score = info.get("score", 0.0)
    if not _is_finite(score):
        return f"info['score'] is {_what(score)}, expected a finite number"
    return None


def _is_number(value: Any) -> bool:
    if type(value) is float or type(value) is int:  # the common case, without the ABC check
        return True
    return isinstance(value, numbers.Real) and not _is_flag(value)


def _is_finite(value: Any) -> bool:
    if type(value) is float:
        return math.isfinite(value)
    try:
        return _is_number(value) and math.isfinite(float(value))
    except (OverflowError, ValueError, TypeError):
        return False


def check_step(value: Any) -> tuple[StepResult | None, Fault | None]:
    """``(result, None)`` for a well-formed ``env.step`` return, else ``(None, fault)``.

    Well formed: ``(observation: str, reward: finite real number, terminated: bool, truncated:
    bool, info: dict)``, Gymnasium's contract; numpy scalars count as numbers and flags.
    """
    if not isinstance(value, tuple | list) or len(value) != 5:
        return None, Fault(
            "observation",
            f"step returned {_what(value)}, expected (observation, reward, terminated, "
            "truncated, info)",
        )
    obs, reward, terminated, truncated, info = value
    if not isinstance(obs, str):
        return None, Fault("observation", f"observation is {_what(obs)}, expected str")
    if not _is_number(reward):
        return None, Fault("reward", f"reward is {_what(reward)}, expected a number")
    if not _is_finite(reward):
        return None, Fault("reward", f"reward is {_what(reward)}, expected a finite number")
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not _is_flag(flag):
            return None, Fault("flag", f"{name} is {_what(flag)}, expected a bool")
    why = _check_info(info)
    if why is not None:
        return None, Fault("info", why)
    return StepResult(obs, float(reward), bool(terminated), bool(truncated), info), None


def check_reset(value: Any) -> tuple[tuple[str, dict] | None, str | None]:
    """``((observation, info), None)`` for a well-formed ``env.reset`` return, else ``(None, why)``."""
    if not isinstance(value, tuple | list) or len(value) != 2:
        return None, f"reset returned {_what(value)}, expected (observation, info)"
    obs, info = value
    if not isinstance(obs, str):
        return None, f"observation is {_what(obs)}, expected str"
    why = _check_info(info)
    return (None, why) if why is not None else ((obs, info), None)


def digest(observation: Any) -> str:
    """A short fingerprint of an observation: what a replay must reproduce."""
    if not isinstance(observation, str):
        return f"<{type(observation).__name__}>"
    data = observation.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=12).hexdigest()
