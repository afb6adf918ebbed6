"""The optimiser comes from ``trainer.optimizer``: AdamW by default, any torch.optim class (or a
dotted path) with its keyword options, built in one place and checked before any work."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from agentrl.config import ConfigError, LearnerConfig, OptimizerConfig, load_config
from agentrl.learner import Learner
from agentrl.learner.optim import build_optimizer

from .helpers import make_cfg


def _groups():
    return [{"params": [torch.nn.Parameter(torch.zeros(3))], "lr": 1e-3}]


def test_the_default_is_adamw_with_torchs_betas_and_eps_and_no_weight_decay():
    opt = build_optimizer(LearnerConfig(lr=1e-3), _groups())
    assert type(opt) is torch.optim.AdamW
    g = opt.param_groups[0]
    assert (g["lr"], g["betas"], g["eps"], g["weight_decay"]) == (1e-3, (0.9, 0.999), 1e-8, 0.0)


def test_a_class_and_its_options_from_the_command_line(tiny):
    cfg = load_config(
        make_cfg("trainer.optimizer.name=SGD", "+trainer.optimizer.kwargs.momentum=0.9")
    )
    model, tok = tiny
    learner = Learner(model, cfg.trainer, tok.pad_token_id, value_head=True)
    assert type(learner.optimizer) is torch.optim.SGD
    assert [g["momentum"] for g in learner.optimizer.param_groups] == [0.9, 0.9]
    # lists become tuples, as torch's signatures document them
    cfg = load_config(make_cfg("+trainer.optimizer.kwargs.betas=[0.9,0.95]"))
    opt = build_optimizer(cfg.trainer, _groups())
    assert opt.param_groups[0]["betas"] == (0.9, 0.95)


def test_a_dotted_path_names_any_optimizer_class():
    cfg = LearnerConfig(optimizer=OptimizerConfig("torch.optim.RMSprop", {"alpha": 0.9}))
    opt = build_optimizer(cfg, _groups())
    assert type(opt) is torch.optim.RMSprop and opt.param_groups[0]["alpha"] == 0.9


@pytest.mark.parametrize(
    ("override", "key", "says"),
    [
        (["trainer.optimizer.name=Adamm"], "trainer.optimizer.name", "no class 'Adamm'"),
        (["trainer.optimizer.name=torch.nn.Linear"], "trainer.optimizer.name", "not a torch"),
        (["trainer.optimizer.name=nopkg.Opt"], "trainer.optimizer.name", "cannot import"),
        (["+trainer.optimizer.kwargs.betaz=1"], "trainer.optimizer.kwargs.betaz", "betas"),
        (["+trainer.optimizer.kwargs.lr=0.1"], "trainer.optimizer.kwargs.lr", "trainer.lr"),
        (["+trainer.optimizer.kwargs.betas=[1.5,0.9]"], "trainer.optimizer.kwargs", "beta"),
        (
            ["trainer.optimizer.name=SGD", "+trainer.optimizer.kwargs.betas=[0.9,0.9]"],
            "trainer.optimizer.kwargs.betas",
            "torch.optim.SGD",
        ),
    ],
)
def test_a_bad_optimizer_is_a_config_error_naming_the_key(override, key, says):
    with pytest.raises(ConfigError) as info:
        load_config(make_cfg(*override))
    msg = str(info.value)
    assert key in msg and says in msg and "\n" not in msg, msg


def test_a_config_made_in_python_is_checked_when_the_optimizer_is_built():
    bad = dataclasses.replace(LearnerConfig(), optimizer=OptimizerConfig("AdamW", {"bta": 1}))
    with pytest.raises(ConfigError, match=r"trainer\.optimizer\.kwargs\.bta"):
        build_optimizer(bad, _groups())
