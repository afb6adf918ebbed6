"""credit=hiper in training: the three-span action format, span layout, critic heads, smoke runs."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from agentrl.config import load_config
from agentrl.learner import StepSequence
from agentrl.methods.hiper import HiperFormat, span_layout, token_offsets
from agentrl.recipe import train
from agentrl.training.preflight import preflight

from .helpers import SMOKE, make_cfg

FMT = HiperFormat()
HIPER = ["credit=hiper", "model.max_new_tokens=64", "trainer.eval_initial=false"]


def test_constrained_renders_and_memory():
    assert FMT.renders("up") == [
        "<switch>SWITCH</switch><subgoal>up</subgoal><action>up</action>"
    ]  # no subgoal yet: only SWITCH
    keep = FMT.renders("up", "push the box")[1]
    assert keep == "<switch>KEEP</switch><subgoal>push the box</subgoal><action>up</action>"
    assert FMT.parse(keep).action == "up"
    assert FMT.remember("old", keep) == "push the box"
    assert FMT.remember("old", "garbage") == "old"
    assert FMT.step_extras(keep) == {
        "switch": False,
        "subgoal": "push the box",
        "switch_span": True,
    }
    assert "Your current sub-goal is: push the box" in FMT.prompt_note("push the box")


def test_span_layout_masks_and_low_value_position(tiny):
    _, tok = tiny
    text = "<switch>KEEP</switch><subgoal>go left</subgoal><action>left</action>"
    ids = list(tok(text, add_special_tokens=False)["input_ids"]) + [tok.eos_token_id]
    decoded, starts, ends = token_offsets(tok, ids)
    assert decoded.startswith(text)
    lay = span_layout(tok, FMT, [StepSequence([1], ids, [0.0] * len(ids), 0)])
    sw, sub, act = (lay.masks[k][0] for k in ("switch", "subgoal", "action"))
    pieces = [decoded[s:e] for s, e in zip(starts, ends)]
    assert "".join(p for p, m in zip(pieces, sw) if m) == "<switch>KEEP</switch>"
    assert "".join(p for p, m in zip(pieces, sub) if m) == "<subgoal>go left</subgoal>"
    assert "".join(p for p, m in zip(pieces, act) if m) == "<action>left</action>"
    assert not (sw | sub | act)[-1]  # the stop token is outside every span
    # V_low: the first token after </subgoal> (the state once the subgoal is written)
    p = lay.low_pos[0]
    assert "".join(pieces[:p]) == "<switch>KEEP</switch><subgoal>go left</subgoal>"
    # no spans at all: V_low falls back to the first token (the last prompt token)
    none = span_layout(tok, FMT, [StepSequence([1], ids[:3], [0.0] * 3, 0)])
    assert none.low_pos == [0] and not np.any(none.masks["action"][0])


def _train_rows(path):
    rows = [json.loads(x) for x in (path / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["phase"] == "train"]


@pytest.mark.parametrize(
    "env",
    [[], ["env=alfworld", "env.max_steps=3", "rollout.group_size=2", "model.max_new_tokens=96"]],
)
def test_smoke_run_hiper(tmp_path, env):
    cfg = load_config(make_cfg(*SMOKE, *HIPER, "env.eval_episodes=2", *env))
    preflight(cfg, tmp_path)
    train(cfg, tmp_path)
    rows = _train_rows(tmp_path)
    assert len(rows) == 2
    for r in rows:
        assert np.isfinite(r["loss/grad_norm"]) and r["loss/value_loss"] > 0
        assert r["credit/value_heads"] == 3.0 and 0 < r["credit/span_token_fraction"] <= 1
        assert 0 <= r["credit/switch_rate"] <= 1 and r["train/invalid_action_rate"] < 1


def test_hiper_records_switch_subgoal_and_three_values(tmp_path, monkeypatch):
    from agentrl import credit

    seen, lookup = [], credit.registry.get

    @functools.wraps(lookup("hiper"))  # keeps the module's signature (its options)
    def spy(batch, **opts):
        seen.append(batch)
        return lookup("hiper")(batch, **opts)

    monkeypatch.setattr(credit.registry, "get", lambda m: spy if m == "hiper" else lookup(m))
    cfg = load_config(make_cfg(*SMOKE, *HIPER, "env.eval_episodes=2", "trainer.iterations=1"))
    train(cfg, tmp_path)
    (b,) = seen
    assert b.extras["switch"].dtype == bool and b.extras["switch_span"].all()
    assert b.extras["switch"][b.t == 0].all()  # constrained decoding: the first turn must SWITCH
    assert all(isinstance(s, str) and s for s in b.extras["subgoal"])
    for k in ("value_high", "value_term"):
        assert np.isfinite(np.asarray(b.extras[k], float)).all()
    assert b.value is not None


def test_hiper_rejects_a_token_shaper(tmp_path):
    from agentrl.config import ConfigError

    cfg = load_config(make_cfg(*SMOKE, "credit=hiper", "credit.token=ucas"))
    with pytest.raises(ConfigError, match="credit.token"):
        preflight(cfg, tmp_path)
