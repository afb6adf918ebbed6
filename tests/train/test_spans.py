"""HiPER's action format: validity, the switch decision, subgoal text and token span masks."""

from __future__ import annotations

import numpy as np

from agentrl.methods.hiper import HiperFormat, instructions, token_mask

FMT = HiperFormat()
GOOD = "<switch>SWITCH</switch><subgoal>find the mug</subgoal><action>go to shelf 1</action>"


def test_valid_response():
    assert FMT.parse(GOOD).action == "go to shelf 1"
    s = FMT.spans(GOOD)
    assert s.switch and s.subgoal == "find the mug" and s.action == "go to shelf 1"
    assert GOOD[slice(*s.switch_span)] == "<switch>SWITCH</switch>"
    assert GOOD[slice(*s.subgoal_span)] == "<subgoal>find the mug</subgoal>"
    keep = FMT.spans(GOOD.replace("SWITCH", " keep "))
    assert not keep.switch and keep.switch_text == "KEEP"


def test_invalid_responses():
    assert FMT.parse("<action>go to shelf 1</action>").reason == "no <switch> tag"
    no_sub = "<switch>KEEP</switch><action>look</action>"
    assert FMT.parse(no_sub).reason == "no <subgoal> tag"
    odd = GOOD.replace("SWITCH", "MAYBE")
    assert FMT.parse(odd).action is None and FMT.spans(odd).switch  # not KEEP: new segment
    assert FMT.parse("<switch>KEEP</switch><subgoal>x</subgoal>").action is None
    assert FMT.parse("").reason == "empty response"
    assert FMT.parse(FMT.render("look")).action == "look"


def test_token_masks_from_offsets():
    # tokens: "<switch>SWITCH</switch>" | "<subgoal>find" | " the mug</subgoal>" | "<action>go..."
    cuts = [0, 23, 36, 54, len(GOOD)]
    starts, ends = np.array(cuts[:-1]), np.array(cuts[1:])
    s = FMT.spans(GOOD)
    assert token_mask(starts, ends, s.switch_span).tolist() == [True, False, False, False]
    assert token_mask(starts, ends, s.subgoal_span).tolist() == [False, True, True, False]
    assert token_mask(starts, ends, s.action_span).tolist() == [False, False, False, True]
    assert not token_mask(starts, ends, None).any()


def test_instructions_carry_the_subgoal():
    assert "None" in instructions(None) and "find the mug" in instructions("find the mug")
