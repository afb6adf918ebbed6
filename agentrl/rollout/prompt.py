"""Per-step prompts: the tokenizer's chat template over instruction, history, observation, actions.

Messages of step t:

- ``system``: the env's instruction and the response hint (when ``instruction`` is on);
- the last K (observation, response) pairs as alternating ``user``/``assistant`` messages
  (``history=K``; ``-1`` for the whole dialogue, ``0`` for none);
- ``user``: ``observation_prefix + observation``, then the admissible actions (when on).

The prompt must fit ``max_prompt_tokens``: the oldest history pairs are dropped first; the
instruction and the current observation are never cut. A prompt that still does not fit is kept
whole and counted (``PromptBuilder.overflows``): cutting the observation would change the task.

The token ids are computed here once, by rendering the template to text and tokenising it as
the chat template intends (no extra special tokens); the engine receives these ids and the
learner trains on exactly the same ids.

Tools (the tool-call format) are rendered by the template itself (``apply_chat_template(...,
tools=...)``), and observations after the first go back in the format's role (``tool``).

``context`` says how step t > 0 is built:

- ``render`` (default): the messages above, rendered afresh each step. Past responses appear as
  the template renders their *text*, which a template may rewrite (Qwen3 drops the ``<think>``
  blocks of past turns), so step t's context need not hold the ids sampled at step t-1;
- ``tokens``: token-in/token-out. Step t's prompt is step t-1's prompt ids, the exact response
  ids sampled there, and the template's rendering of the new observation message and the
  generation prompt (:meth:`PromptBuilder.extend`): every token of the dialogue is the one the
  model read or produced. The whole dialogue is kept (``history`` does not apply); a prompt
  over ``max_prompt_tokens`` is kept whole and counted, as in ``render``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..episodes import Turn

__all__ = ["PromptBuilder", "PromptConfig", "Turn"]


@dataclass(frozen=True)
class PromptConfig:
    instruction: bool = True
    history: int = 2
    admissible_actions: bool = True
    observation_prefix: str = "Current observation:\n"
    history_prefix: str = "Observation:\n"
    actions_prefix: str = "Admissible actions: "
    response_hint: str = (
        "Think briefly if you need to, then give exactly one action as <action>ACTION</action>."
    )
    system_role: bool = (
        True  # instruction as a system message; else prepended to the first user message
    )
    max_prompt_tokens: int = 2048
    context: str = "render"  # or "tokens": step t extends step t-1's exact ids

    def __post_init__(self) -> None:
        if self.context not in ("render", "tokens"):
            raise ValueError(f"context must be render or tokens, got {self.context!r}")
        if self.history < -1:
            raise ValueError(f"history must be -1 (all), 0 or a positive count, got {self.history}")
        if self.max_prompt_tokens < 1:
            raise ValueError(f"max_prompt_tokens must be >= 1, got {self.max_prompt_tokens}")


class PromptBuilder:
    """Builds prompt token ids with ``tokenizer``'s chat template."""

    #: Encoded prompts are memoised (states repeat across a group and across iterations).
    CACHE_SIZE = 65536

    def __init__(self, tokenizer, cfg: PromptConfig):
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.overflows = 0
        self._cache: dict[tuple, list[int]] = {}

    def messages(
        self,
        instruction: str,
        history: Sequence[Turn],
        observation: str,
        actions: Sequence[str] | None,
        role: str = "user",
    ) -> list[dict[str, str]]:
        """The messages of one step; observations after the first shown one are ``role``
        messages (``tool``: the observation as is, without the prefixes)."""
        cfg = self.cfg
        msgs: list[dict[str, str]] = []
        system = ""
        if cfg.instruction:
            system = "\n".join(x for x in (instruction.strip(), cfg.response_hint.strip()) if x)
        if system and cfg.system_role:
            msgs.append({"role": "system", "content": system})
        for i, turn in enumerate(history):
            msgs.append(self._observation(turn.observation, None, role, i > 0, past=True))
            msgs.append({"role": "assistant", "content": turn.response})
        msgs.append(self._observation(observation, actions, role, bool(history)))
        if system and not cfg.system_role:
            msgs[0] = {"role": "user", "content": system + "\n\n" + msgs[0]["content"]}
        return msgs

    def _observation(
        self, text: str, actions: Sequence[str] | None, role: str, later: bool, past: bool = False
    ) -> dict[str, str]:
        cfg = self.cfg
        if later and role != "user":
            content = text
        else:
            content = (cfg.history_prefix if past else cfg.observation_prefix) + text
        if not past and cfg.admissible_actions and actions:
            content += "\n" + cfg.actions_prefix + ", ".join(actions)
        return {"role": role if later else "user", "content": content}

    def _render(self, messages: list[dict[str, str]], tools: list[dict[str, Any]] | None) -> str:
        if tools:
            return self.tokenizer.apply_chat_template(
                messages, tools=tools, add_generation_prompt=True, tokenize=False
            )
        return self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False
        )

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode(
        self, messages: list[dict[str, str]], tools: list[dict[str, Any]] | None = None
    ) -> list[int]:
        key = (
            tuple((m["role"], m["content"]) for m in messages),
            json.dumps(tools, sort_keys=True) if tools else None,
        )
        ids = self._cache.get(key)
        if ids is None:
            ids = self._ids(self._render(messages, tools))
            if len(self._cache) >= self.CACHE_SIZE:
                self._cache.clear()
            self._cache[key] = ids
        return list(ids)

    def build(
        self,
        instruction: str,
        history: Sequence[Turn],
        observation: str,
        actions: Sequence[str] | None,
        *,
        tools: list[dict[str, Any]] | None = None,
        role: str = "user",
    ) -> list[int]:
        """Prompt token ids for one step, within ``max_prompt_tokens`` where possible."""
        k = self.cfg.history
        hist = list(history) if k == -1 else (list(history)[-k:] if k > 0 else [])
        while True:
            ids = self.encode(self.messages(instruction, hist, observation, actions, role), tools)
            if len(ids) <= self.cfg.max_prompt_tokens:
                return ids
            if not hist:
                self.overflows += 1
                return ids
            # Drop the oldest pairs; jump by the estimated excess to keep this loop short.
            per_turn = max(1, (len(ids) - 1) // (len(hist) + 1))
            drop = max(1, min(len(hist), (len(ids) - self.cfg.max_prompt_tokens) // per_turn))
            hist = hist[drop:]

    #: Stands for the assistant's response when the template's continuation is rendered.
    MARK = "AGENTRL_RESPONSE_MARK"

    def continuation(
        self,
        observation: str,
        actions: Sequence[str] | None,
        *,
        tools: list[dict[str, Any]] | None = None,
        role: str = "user",
    ) -> str:
        """The template's text after an assistant response: its end of turn, the new
        observation message and the generation prompt. Rendered on a stand-in dialogue (user,
        assistant, new message): a template that rewrites past turns changes nothing here."""
        msgs = [
            {"role": "user", "content": "?"},
            {"role": "assistant", "content": self.MARK},
            self._observation(observation, actions, role, True),
        ]
        key = ("continuation", tuple((m["role"], m["content"]) for m in msgs), json.dumps(tools))
        text = self._cache.get(key)
        if text is None:
            full = self._render(msgs, tools)
            at = full.rfind(self.MARK)
            if at < 0:
                raise ValueError(
                    "the chat template does not write the assistant's content as given; "
                    "rollout.prompt.context=tokens needs one that does (use context=render)"
                )
            text = full[at + len(self.MARK) :]
            if len(self._cache) >= self.CACHE_SIZE:
                self._cache.clear()
            self._cache[key] = text
        return text

    def extend(
        self,
        prompt_ids: Sequence[int],
        response_ids: Sequence[int],
        observation: str,
        actions: Sequence[str] | None,
        *,
        stop_id: int | None = None,
        tools: list[dict[str, Any]] | None = None,
        role: str = "user",
    ) -> list[int]:
        """Token-in/token-out: the previous step's exact prompt and response ids, then the
        template's continuation (:meth:`continuation`). A response that ended with the stop
        token ``stop_id`` has closed its turn: the continuation's copy of that token is left out."""
        text = self.continuation(observation, actions, tools=tools, role=role)
        ids = list(prompt_ids) + list(response_ids)
        if stop_id is not None and response_ids and response_ids[-1] == stop_id:
            stop_text = self.tokenizer.decode([stop_id], skip_special_tokens=False)
            if stop_text and text.startswith(stop_text):
                text = text[len(stop_text) :]
        ids += self._ids(text)
        if len(ids) > self.cfg.max_prompt_tokens:
            self.overflows += 1
        return ids
