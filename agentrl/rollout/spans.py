"""HiPER's action format: ``<switch>KEEP|SWITCH</switch><subgoal>…</subgoal><action>…</action>``.

Per turn the policy decides whether to keep its current subgoal or switch to a new one, writes
the subgoal, then one action (Peng et al., 2026, arXiv:2602.16165). :class:`HiperFormat` is an
:class:`~agentrl.rollout.parse.ActionFormat`: ``parse`` returns the action, or none (an invalid
step, as for any format) when a span is missing or the switch says neither KEEP nor SWITCH;
``spans`` returns what ``credit=hiper`` and the learner need: the switch decision, the subgoal
text and each span's character range (tags included, as the reference masks them), which
:func:`token_mask` turns into per-token masks from the tokens' character offsets.

Validity follows the authors' projection (``alfworld_projection_options``): an action tag, a
switch tag holding KEEP or SWITCH (case-insensitive) and a subgoal tag are all required. A turn
starts a new segment when its switch text is non-empty and not KEEP (their mask builder's rule);
a missing or empty switch counts as KEEP there (the step is invalid anyway).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentrl.envs.commands import ascii_upper

from .parse import ActionFormat, ParsedAction

__all__ = ["HiperFormat", "HiperSpans", "instructions", "token_mask"]

_TAGS = ("switch", "subgoal", "action")


@dataclass(frozen=True)
class HiperSpans:
    """One response's HiPER structure (``None`` spans: the tag is missing)."""

    switch: bool  # this turn starts a new subgoal segment
    switch_text: str | None
    subgoal: str | None
    action: str | None
    switch_span: tuple[int, int] | None
    subgoal_span: tuple[int, int] | None
    action_span: tuple[int, int] | None


def _find(tag: str, text: str) -> tuple[str, tuple[int, int]] | None:
    """Content and (start, end) character range (tags included) of the first complete tag."""
    m = re.search(rf"<{tag}>(.*?)</{tag}>", text, re.DOTALL)
    return None if m is None else (m.group(1), (m.start(), m.end()))


@dataclass(frozen=True)
class HiperFormat(ActionFormat):
    """``<switch>…</switch><subgoal>…</subgoal><action>…</action>`` per turn."""

    pattern: str | None = r"<action>(.*?)</action>"
    template: str = "<switch>SWITCH</switch><subgoal>{action}</subgoal><action>{action}</action>"

    def spans(self, response: str) -> HiperSpans:
        text = response if isinstance(response, str) else ""
        found = {tag: _find(tag, text) for tag in _TAGS}
        sw = found["switch"]
        sw_text = None if sw is None else ascii_upper(sw[0].strip())  # "ſwitch" is no SWITCH
        return HiperSpans(
            switch=bool(sw_text) and sw_text != "KEEP",
            switch_text=sw_text,
            subgoal=None if found["subgoal"] is None else found["subgoal"][0].strip(),
            action=None if found["action"] is None else found["action"][0].strip(),
            switch_span=None if sw is None else sw[1],
            subgoal_span=None if found["subgoal"] is None else found["subgoal"][1],
            action_span=None if found["action"] is None else found["action"][1],
        )

    def renders(self, action: str, memory: Any = None) -> list[str]:
        """Constrained decoding can write SWITCH with the action as the new subgoal, or (once a
        subgoal exists) KEEP with the current subgoal: the subgoal space of free text cannot be
        enumerated, so these are the two subgoals a constrained response can hold."""
        out = [f"<switch>SWITCH</switch><subgoal>{action}</subgoal><action>{action}</action>"]
        if memory:
            out.append(f"<switch>KEEP</switch><subgoal>{memory}</subgoal><action>{action}</action>")
        return out

    def prompt_note(self, memory: Any = None) -> str:
        return "\n\n" + instructions(memory)

    def remember(self, memory: Any, response: str) -> Any:
        """The current subgoal: the last one written (kept when a response has none)."""
        sub = self.spans(response).subgoal
        return sub if sub else memory

    def step_extras(self, response: str) -> dict[str, Any]:
        s = self.spans(response)
        return {"switch": s.switch, "subgoal": s.subgoal, "switch_span": s.switch_span is not None}

    def parse(self, response: str, finish_reason: str = "stop") -> ParsedAction:
        parsed = super().parse(response, finish_reason)
        if parsed.action is None:
            return parsed
        s = self.spans(response)
        if s.switch_text is None:
            return ParsedAction(None, "no <switch> tag")
        if s.switch_text not in ("KEEP", "SWITCH"):
            return ParsedAction(None, "switch is neither KEEP nor SWITCH")
        if s.subgoal is None:
            return ParsedAction(None, "no <subgoal> tag")
        return parsed


def token_mask(starts: np.ndarray, ends: np.ndarray, span: tuple[int, int] | None) -> np.ndarray:
    """Per token, whether its character range [start, end) overlaps ``span`` (all False: none)."""
    starts, ends = np.asarray(starts), np.asarray(ends)
    if span is None:
        return np.zeros(len(starts), dtype=bool)
    lo, hi = span
    return (ends > lo) & (starts < hi)


def instructions(current_subgoal: str | None) -> str:
    """The prompt's HiPER block: the current subgoal and the three spans to write."""
    return (
        f"Your current sub-goal is: {current_subgoal or 'None'}\n"
        "At every step, reconsider your sub-goal given the latest observation. Respond with "
        "exactly three blocks, in this order and nothing else:\n"
        "<switch>KEEP or SWITCH</switch> (KEEP continues the current sub-goal, SWITCH starts a "
        "new short one)\n"
        "<subgoal>the sub-goal you follow next (on KEEP, the current one unchanged)</subgoal>\n"
        "<action>exactly one admissible action</action>"
    )
