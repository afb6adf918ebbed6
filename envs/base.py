"""The text-environment contract every agentrl environment speaks.

An environment is a :class:`gymnasium.Env` whose observations and actions are strings. On
``reset`` and on every ``step`` it returns an ``info`` dict with the keys of :class:`EnvInfo`
(built with :func:`make_info`, which checks them). Credit modules and the trainer rely on
these keys; see ``docs/architecture.md``.
"""

from __future__ import annotations

import string
from collections.abc import Hashable, Sequence
from typing import Any, ClassVar, NotRequired, TypedDict

import gymnasium as gym
from gymnasium.spaces import Text

__all__ = ["INFO_KEYS", "OPTIONAL_INFO_KEYS", "EnvInfo", "FreeText", "TextEnv", "make_info"]

#: Characters ``FreeText.sample`` draws from (membership accepts any string).
_SAMPLE_CHARSET = string.ascii_letters + string.digits + string.punctuation + " "


class FreeText(Text):
    """A text space that contains every ``str`` up to ``max_length`` characters.

    Gymnasium's :class:`~gymnasium.spaces.Text` only admits a fixed character set; environment
    text (grids with ``√``, web pages, model output) is open-ended, so membership here only checks
    type and length. Sampling still draws from printable ASCII.
    """

    def __init__(self, max_length: int = 100_000, *, min_length: int = 0, seed: Any = None):
        super().__init__(max_length, min_length=min_length, charset=_SAMPLE_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"FreeText({self.min_length}, {self.max_length})"


class EnvInfo(TypedDict):
    """The ``info`` keys every agentrl environment returns on reset and on every step.

    - ``instruction``: the task in words (the goal text shown to the agent).
    - ``task_id``: stable identity of the task; ``reset(options={"task_id": ...})`` replays it.
    - ``category``: the task's category (ALFWorld task type, WebShop product category,
      Sokoban size and box count).
    - ``admissible_actions``: the valid commands now, or ``None`` where the space is open.
    - ``state_key``: canonical identity of the *true* environment state (not of the rendered
      text): equal keys mean equal states. Used to group steps for credit assignment.
    - ``action_valid``: whether the last action was understood and applicable (``True`` on reset).
    - ``won``: whether the task is solved.
    - ``score``: the environment's partial score in ``[0, 1]``.
    - ``milestones``: names of the sub-goals reached so far, in the order reached.
    - ``error`` (optional): set by the env pool when a worker died and the episode was cut.
    - ``tools`` (optional, reset info): the env's commands as OpenAI function tools, for the
      tool-call action format; ``tool_actions`` (optional) maps a tool to the command template a
      call becomes (see :mod:`agentrl.envs.tools`).
    """

    instruction: str
    task_id: str
    category: str
    admissible_actions: list[str] | None
    state_key: Hashable
    action_valid: bool
    won: bool
    score: float
    milestones: tuple[str, ...]
    error: NotRequired[str]
    tools: NotRequired[list[dict[str, Any]]]
    tool_actions: NotRequired[dict[str, str]]


INFO_KEYS: tuple[str, ...] = (
    "instruction",
    "task_id",
    "category",
    "admissible_actions",
    "state_key",
    "action_valid",
    "won",
    "score",
    "milestones",
)

#: Info keys an env may set (not required): the pool's ``error``, and on reset the tool
#: declaration of the tool-call action format (``tools``, ``tool_actions``; :mod:`.tools`).
OPTIONAL_INFO_KEYS: tuple[str, ...] = ("error", "tools", "tool_actions")


def make_info(
    *,
    instruction: str,
    task_id: str,
    category: str,
    admissible_actions: Sequence[str] | None,
    state_key: Hashable,
    action_valid: bool,
    won: bool,
    score: float,
    milestones: Sequence[str] = (),
    **extra: Any,
) -> dict[str, Any]:
    """Build a checked ``info`` dict; extra, env-specific keys are kept as given.

    Raises ``TypeError``/``ValueError`` naming the key when a value breaks the contract, so an
    environment bug surfaces at its source rather than deep inside credit assignment.
    """
    if not isinstance(instruction, str):
        raise TypeError(f"info['instruction'] must be str, got {type(instruction).__name__}")
    if not isinstance(task_id, str):
        raise TypeError(f"info['task_id'] must be str, got {type(task_id).__name__}")
    if not isinstance(category, str):
        raise TypeError(f"info['category'] must be str, got {type(category).__name__}")
    if admissible_actions is not None:
        admissible_actions = list(admissible_actions)
        if not all(isinstance(a, str) for a in admissible_actions):
            raise TypeError("info['admissible_actions'] must be a list of str or None")
    try:
        hash(state_key)
    except TypeError as exc:
        raise TypeError(
            f"info['state_key'] must be hashable, got {type(state_key).__name__}"
        ) from exc
    score = float(score)
    if not 0.0 <= score <= 1.0:
        raise ValueError(f"info['score'] must lie in [0, 1], got {score}")
    info: dict[str, Any] = {
        "instruction": instruction,
        "task_id": task_id,
        "category": category,
        "admissible_actions": admissible_actions,
        "state_key": state_key,
        "action_valid": bool(action_valid),
        "won": bool(won),
        "score": score,
        "milestones": tuple(str(m) for m in milestones),
    }
    info.update(extra)
    return info


class TextEnv(gym.Env[str, str]):
    """Base class for agentrl text environments.

    Subclasses implement ``reset``/``step`` with the Gymnasium API, return infos built by
    :func:`make_info`, and implement :meth:`expert_action`. ``render`` returns the current
    observation text (``render_mode="ansi"``).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, render_mode: str | None = None, *, max_text_length: int = 100_000):
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.render_mode = render_mode
        self.observation_space = FreeText(max_text_length)
        self.action_space = FreeText(max_text_length)

    def expert_action(self) -> str:
        """An action of an expert policy from the current state (used by tests and evaluation)."""
        raise NotImplementedError(f"{type(self).__name__} has no expert")

    def task_ids(self, split: str, limit: int | None = None) -> list[str]:
        """The fixed, ordered task ids of ``split`` (for evaluation sets and task lists).

        ``reset(options={"task_id": tid})`` starts task ``tid``. Training usually draws tasks
        by seed instead: ``reset(seed=s)`` picks a training task deterministically from ``s``.
        """
        raise NotImplementedError(f"{type(self).__name__} lists no task ids")

    def render(self) -> str | None:  # type: ignore[override]
        if self.render_mode == "ansi":
            return self.current_observation()
        return None

    def current_observation(self) -> str:
        """The observation text of the current state."""
        raise NotImplementedError
