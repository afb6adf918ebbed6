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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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

    def __post_init__(self) -> None:
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
    ) -> list[dict[str, str]]:
        cfg = self.cfg
        msgs: list[dict[str, str]] = []
        system = ""
        if cfg.instruction:
            system = "\n".join(x for x in (instruction.strip(), cfg.response_hint.strip()) if x)
        if system and cfg.system_role:
            msgs.append({"role": "system", "content": system})
        for turn in history:
            msgs.append({"role": "user", "content": cfg.history_prefix + turn.observation})
            msgs.append({"role": "assistant", "content": turn.response})
        content = cfg.observation_prefix + observation
        if cfg.admissible_actions and actions:
            content += "\n" + cfg.actions_prefix + ", ".join(actions)
        msgs.append({"role": "user", "content": content})
        if system and not cfg.system_role:
            msgs[0] = {"role": "user", "content": system + "\n\n" + msgs[0]["content"]}
        return msgs

    def encode(self, messages: list[dict[str, str]]) -> list[int]:
        key = tuple((m["role"], m["content"]) for m in messages)
        ids = self._cache.get(key)
        if ids is None:
            text = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
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
    ) -> list[int]:
        """Prompt token ids for one step, within ``max_prompt_tokens`` where possible."""
        k = self.cfg.history
        hist = list(history) if k == -1 else (list(history)[-k:] if k > 0 else [])
        while True:
            ids = self.encode(self.messages(instruction, hist, observation, actions))
            if len(ids) <= self.cfg.max_prompt_tokens:
                return ids
            if not hist:
                self.overflows += 1
                return ids
            # Drop the oldest pairs; jump by the estimated excess to keep this loop short.
            per_turn = max(1, (len(ids) - 1) // (len(hist) + 1))
            drop = max(1, min(len(hist), (len(ids) - self.cfg.max_prompt_tokens) // per_turn))
            hist = hist[drop:]
