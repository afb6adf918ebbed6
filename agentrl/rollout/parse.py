r"""Reading the action out of a model response, and the response template for constrained decoding.

Default format: ``<action>…</action>``, optionally preceded by ``<think>…</think>``. The action
is the text of the *last* complete action tag, stripped. Empty, endless (cut at the token
limit), or garbage output yields no action: the step is invalid (the env gets an empty action
and the credit module charges the invalid-action penalty), never an exception.

Patterns are matched with ``re.ASCII``: ``\w``, ``\s``, ``\d``, ``\b`` and case-insensitive
matching (``(?i)``) cover ASCII only, so a look-alike letter (``<actıon>``, ``ſ``, the Kelvin sign)
never turns into a tag (:mod:`agentrl.envs.commands` does the same for the envs' verbs).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["FLAGS", "ActionFormat", "ParsedAction", "action_token_counter"]

#: How every action pattern is matched (ASCII classes and case folding; ``.`` spans lines).
FLAGS = re.DOTALL | re.ASCII


@dataclass(frozen=True)
class ParsedAction:
    action: str | None  # None: nothing could be parsed
    reason: str = ""  # why parsing failed ("" when it succeeded)


@dataclass(frozen=True)
class ActionFormat:
    """How actions are written.

    Args:
        pattern: regex whose group 1 is the action (``None``: the whole response, stripped).
        template: the response an action is written as, for constrained decoding
            (``{action}`` is replaced by the action).
        think: allow a ``<think>…</think>`` block before the action; with ``require_think``
            a response without one is invalid.
        max_action_chars: longer actions are rejected as garbage.
    """

    pattern: str | None = r"<action>(.*?)</action>"
    template: str = "<action>{action}</action>"
    think: bool = False
    require_think: bool = False
    max_action_chars: int = 512

    def __post_init__(self) -> None:
        if self.pattern is not None:
            try:
                rx = re.compile(self.pattern, FLAGS)
            except (re.error, ValueError) as exc:  # ValueError: (?u) with re.ASCII
                raise ValueError(
                    f"action pattern {self.pattern!r} is not a valid regex: {exc}"
                ) from exc
            if rx.groups < 1:
                raise ValueError(
                    f"action pattern {self.pattern!r} needs a capture group for the action"
                )
        if "{action}" not in self.template:
            raise ValueError(f"action template {self.template!r} must contain {{action}}")

    def parse(self, response: str, finish_reason: str = "stop") -> ParsedAction:
        if not isinstance(response, str) or not response.strip():
            return ParsedAction(None, "empty response")
        text = response
        if self.require_think and not re.search(r"<think>.*?</think>", text, FLAGS):
            return ParsedAction(None, "missing <think> block")
        if self.think:
            text = re.sub(r"<think>.*?</think>", "", text, flags=FLAGS)
        if self.pattern is None:
            action = text.strip()
        else:
            found = re.findall(self.pattern, text, FLAGS)
            if not found:
                return ParsedAction(
                    None,
                    "no action tag"
                    if finish_reason == "stop"
                    else "no action tag before the token limit",
                )
            action = found[-1] if isinstance(found[-1], str) else found[-1][0]
            action = action.strip()
        if not action:
            return ParsedAction(None, "empty action")
        if len(action) > self.max_action_chars:
            return ParsedAction(None, "action too long")
        return ParsedAction(action)

    def render(self, action: str) -> str:
        return self.template.replace("{action}", action)

    # -- hooks for formats that depend on the episode (the tool-call format's tools; none here) ---
    #: The role of observations after the first in a multi-turn prompt.
    observation_role = "user"

    def bind(self, info: dict[str, Any]) -> ActionFormat:
        """This format for an episode whose reset info is ``info``."""
        return self

    @property
    def prompt_tools(self) -> list[dict[str, Any]] | None:
        """Tools the prompt's chat template renders (``apply_chat_template(tools=...)``)."""
        return None

    # -- hooks for formats that carry state across turns (HiPER's subgoal; none here) -------------
    def renders(self, action: str, memory: Any = None) -> list[str]:
        """Every response that writes ``action`` under constrained decoding, given ``memory``."""
        return [self.render(action)]

    def prompt_note(self, memory: Any = None) -> str:
        """Text added after the observation in the prompt (given the format's memory)."""
        return ""

    def remember(self, memory: Any, response: str) -> Any:
        """The memory after ``response`` (e.g. the current subgoal)."""
        return memory

    def step_extras(self, response: str) -> dict[str, Any]:
        """Per-step columns this format records for the step batch's ``extras``."""
        return {}


def action_token_counter(tokenizer: Any, fmt: ActionFormat) -> Callable[[str], int]:
    """The token count of an action as ``fmt`` renders it under constrained decoding (the
    longest of its renderings), by ``tokenizer``, stop token included: what the env contract's
    budget rule measures (``python -m agentrl.check_env`` and the trainer's config check)."""
    stop = 0 if tokenizer.eos_token_id is None else 1

    def count(action: str) -> int:
        texts = fmt.renders(action)
        if not texts:  # e.g. a tool-call format not bound to the env's tools (fmt.bind(info))
            raise ValueError(f"the action format cannot write {action!r}: is it bound to the env?")
        return max(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts) + stop

    return count
