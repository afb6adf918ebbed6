"""Trainer hooks: what the registry resolves from each credit module's declarations."""

from __future__ import annotations

import pytest
from agentrl.credit import TrainerAsks, token_shapers
from agentrl.credit.synthetic import random_batch

from agentrl import credit
from agentrl.methods import (
    BASE_INPUTS,
    FormatHook,
    StepHooks,
    format_hook,
    formats,
    register_format,
    register_steps,
    trainer_hooks,
)
from agentrl.methods.hiper import HiperFormat
from agentrl.rollout import ActionFormat

ACTION = {"pattern": r"<action>(.*?)</action>", "template": "<action>{action}</action>",
          "think": True, "require_think": False, "max_action_chars": 40}  # fmt: skip


@pytest.mark.parametrize("name", credit.available())
def test_every_module_gets_what_it_needs_and_the_critic_it_asks_for(name):
    needs = credit.needs(name)
    hooks = trainer_hooks(name, needs)
    assert needs <= hooks.supplies
    opts = hooks.learner_options()
    assert opts["value_head"] == ("value" in needs)
    assert opts["value_outputs"] == credit.asks(name).value_outputs
    assert not opts["keep_reference"]
    # the generic pass computes what no step hook supplies, and nothing else
    own = hooks.steps.supplies if hooks.steps else frozenset()
    assert hooks.prompt_features == (needs & {"value", "embedding"}) - own


def test_the_default_format_is_the_configured_one():
    name, hook = format_hook("gigpo")
    assert name == "default" and hook.prompt_hint is None and not hook.records
    fmt = hook.build(ACTION)
    assert type(fmt) is ActionFormat and fmt.think and fmt.max_action_chars == 40
    hooks = trainer_hooks("gae", credit.needs("gae"))
    assert hooks.steps is None and hooks.supplies == BASE_INPUTS


def test_hiper_asks_for_its_format_critic_and_steps():
    hooks = trainer_hooks("hiper", credit.needs("hiper"))
    assert hooks.format_name == "hiper" and hooks.value_outputs == 3
    fmt = hooks.format.build(ACTION)  # its own tags; think and the length cap as configured
    assert isinstance(fmt, HiperFormat) and fmt.think and fmt.max_action_chars == 40
    assert fmt.pattern == HiperFormat.pattern and "<switch>" in fmt.template
    assert hooks.format.prompt_hint and hooks.steps.sets_token_advantages
    assert hooks.prompt_features == frozenset()  # the step hooks read all three values
    assert credit.needs("hiper") <= hooks.supplies
    # the dry run's batch carries every column HAE reads
    batch = hooks.example(random_batch(n_groups=2, group_size=2, max_len=4, seed=1))
    assert {"switch", "subgoal", "switch_span", "value_high", "value_term"} <= set(batch.extras)
    assert credit.compute(batch, "hiper").advantages.shape == (len(batch),)


@pytest.mark.parametrize("shaper", token_shapers.available())
def test_the_reference_is_kept_for_the_shapers_that_read_it(shaper):
    opts = trainer_hooks("grpo", credit.needs("grpo"), shaper).learner_options()
    assert opts["keep_reference"] == (shaper == "progress")


def test_registering_checks_the_hook_and_refuses_a_second_one():
    assert {"default", "hiper"} <= set(formats())
    with pytest.raises(TypeError, match="FormatHook"):
        register_format("x", lambda action: ActionFormat())
    with pytest.raises(ValueError, match="already registered"):
        register_format("hiper", FormatHook(build=lambda action: ActionFormat()))
    with pytest.raises(ValueError, match="already registered"):
        register_steps("hiper", StepHooks(prepare=print, update_inputs=print))
    with pytest.raises(TypeError, match="TrainerAsks"):
        credit.register("never", asks={"action_format": "hiper"})
    with pytest.raises(ValueError, match="value_outputs"):
        TrainerAsks(value_outputs=0)


def test_a_name_no_trainer_module_registers_is_an_error(monkeypatch):
    monkeypatch.setitem(credit.registry._ASKS, "grpo", TrainerAsks(action_format="xml_call"))
    with pytest.raises(KeyError, match="credit module 'grpo' asks for action format 'xml_call'"):
        trainer_hooks("grpo", credit.needs("grpo"))
    monkeypatch.setitem(credit.registry._ASKS, "grpo", TrainerAsks(steps="nope"))
    with pytest.raises(KeyError, match="step hooks 'nope'"):
        trainer_hooks("grpo", credit.needs("grpo"))


def test_unknown_options_are_checked_in_one_place():
    with pytest.raises(credit.UnknownOptionError) as err:
        credit.check_option_names("grpo", {"bogus": 1, "mode": "mean", "also": 2})
    assert (err.value.unknown, "mode" in err.value.valid) == (["also", "bogus"], True)
    with pytest.raises(TypeError, match="unknown option\\(s\\) 'bogus'"):
        credit.compute(random_batch(n_groups=2, group_size=2, max_len=3), "grpo", bogus=1)
