"""The typed config: one source of keys and defaults, presets that only set values, and bad
values that fail before any work with one line naming the key (exit code 2 on the command line)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.errors import HydraException
from omegaconf import OmegaConf

from agentrl.config import (
    ConfigError,
    LearnerConfig,
    TrainConfig,
    TrainerConfig,
    load_config,
    reference_markdown,
)
from agentrl.training.preflight import preflight

from .helpers import CONFIG_DIR, make_cfg, options

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_run_is_the_dataclass_defaults():
    cfg = load_config(make_cfg())
    assert cfg.trainer == dataclasses.replace(TrainerConfig(), micro_batch_tokens=16384)
    assert cfg.credit.name == "gigpo" and cfg.env.id == "Sokoban-v0" and cfg.model.name == "tiny"
    # interpolated defaults resolve to the model preset's values
    assert cfg.rollout.max_new_tokens == cfg.model.max_new_tokens == 8
    assert cfg.rollout.prompt.max_prompt_tokens == cfg.model.max_prompt_tokens


@pytest.mark.parametrize(
    "group", ["env", "credit", "model", "rollout", "trainer"], ids=lambda g: f"group={g}"
)
def test_every_preset_composes_and_checks(group):
    for name in options(group):
        extra = ["model.name=/tmp"] if (group, name) == ("model", "path") else []
        cfg = load_config(make_cfg(f"{group}={name}", *extra))
        assert isinstance(cfg, TrainConfig)


def test_the_learner_reads_the_trainer_group():
    assert issubclass(TrainerConfig, LearnerConfig)
    learner_keys = {f.name for f in dataclasses.fields(LearnerConfig)}
    assert {"lr", "epochs", "clip_low", "entropy_coef", "micro_batch_tokens"} <= learner_keys


def test_config_reference_in_docs_is_current():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_config_docs.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ref = reference_markdown()
    for f in dataclasses.fields(TrainerConfig):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        key = f"`trainer.{f.name}." if dataclasses.is_dataclass(default) else f"`trainer.{f.name}`"
        assert key in ref and f.metadata["help"], f.name


def test_every_field_has_a_description():
    def walk(cls, prefix=""):
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help"), f"{prefix}{f.name} has no description"
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
            if dataclasses.is_dataclass(default):
                walk(type(default), f"{prefix}{f.name}.")

    walk(TrainConfig)


#: (override, the key the one-line error must name). Each fails before the model loads.
BAD = [
    ("trainer.lr=-1", "trainer.lr"),
    ("trainer.lr=0", "trainer.lr"),
    ("trainer.lr=inf", "trainer.lr"),
    ("trainer.lr=nan", "trainer.lr"),
    ("trainer.lr=1e400", "trainer.lr"),
    ("trainer.lr=1e30", "trainer.lr"),
    ("trainer.lr=abc", "trainer.lr"),
    ("trainer.epochs=two", "trainer.epochs"),
    ("trainer.epochs=0", "trainer.epochs"),
    ("trainer.iterations=-1", "trainer.iterations"),
    ("trainer.clip_low=1.5", "trainer.clip_low"),
    ("trainer.clip_high=-0.1", "trainer.clip_high"),
    ("trainer.loss_agg=mean", "trainer.loss_agg"),
    ("trainer.kl_estimator=k1", "trainer.kl_estimator"),
    ("trainer.kl_estimator=k4", "trainer.kl_estimator"),
    ("trainer.loss_tokens=forced", "trainer.loss_tokens"),
    ("trainer.optimizer.name=Nope", "trainer.optimizer.name"),
    ("+trainer.optimizer.kwargs.betaz=1", "trainer.optimizer.kwargs.betaz"),
    ("trainer.kl_coef=-1", "trainer.kl_coef"),
    ("trainer.max_grad_norm=-1", "trainer.max_grad_norm"),
    ("trainer.dtype=fp8", "trainer.dtype"),
    ("trainer.device=tpu", "trainer.device"),
    ("trainer.device=cuda", "trainer.device"),
    ("trainer.num_threads=0", "trainer.num_threads"),
    ("trainer.keep_checkpoints=0", "trainer.keep_checkpoints"),
    ("trainer.micro_batch_size=1000", "trainer.micro_batch_size"),
    ("trainer.resume=/missing/run", "trainer.resume"),
    ("trainer.value_lr=0", "trainer.value_lr"),
    ("+trainer.lrr=0.1", "trainer.lrr"),
    ("rollout.group_size=0", "rollout.group_size"),
    ("rollout.tasks_per_iter=0", "rollout.tasks_per_iter"),
    ("rollout.temperature=0", "rollout.temperature"),
    ("rollout.top_p=0", "rollout.top_p"),
    ("rollout.top_p=1.5", "rollout.top_p"),
    ("rollout.backend=tgi", "rollout.backend"),
    ("rollout.action.pattern=no_group", "rollout.action.pattern"),
    ("rollout.action.pattern=(unclosed", "rollout.action.pattern"),
    ("rollout.action.template=noplaceholder", "rollout.action.template"),
    ("rollout.action.require_think=true", "rollout.action.require_think"),
    ("rollout.max_new_tokens=0", "rollout.max_new_tokens"),
    ("env.max_steps=0", "env.max_steps"),
    ("env.eval_episodes=0", "env.eval_episodes"),
    ("env.invalid_penalty=0.5", "env.invalid_penalty"),
    ("env.num_workers=-1", "env.num_workers"),
    ("env.step_timeout=0", "env.step_timeout"),
    ("env.id=Nope-v0", "env.id"),
    ("env.eval_split=bogus", "env.eval_split"),
    ("env.eval_split=null", "env.eval_seed_base"),
    ("env.kwargs.dim_room=-3", "env.kwargs"),
    ("+env.kwargs.colour=red", "env.kwargs.colour"),
    ("env.train_tasks=bogus", "env.train_tasks"),
    ("credit.name=nope", "credit.name"),
    ("+credit.options.bogus=1", "credit.options.bogus"),
    ("credit.options.gamma=2.0", "credit.options.gamma"),
    ("credit.options.mode=median", "credit.options.mode"),
    ("model.name=/nonexistent", "model.name"),
    ("model.lora.r=0", "model.lora.r"),
    ("model.lora.dropout=1", "model.lora.dropout"),
    ("model.dtype=int8", "model.dtype"),
    ("seed=-1", "seed"),
    ("output_dir=/proc/agentrl-not-writable", "output_dir"),
]


@pytest.mark.parametrize(("override", "key"), BAD, ids=[o for o, _ in BAD])
def test_bad_override_fails_naming_the_key(override, key, tmp_path):
    assert len(BAD) >= 40
    try:
        raw = make_cfg(override)
    except HydraException as exc:  # Hydra rejects unknown keys and wrong types at composition
        assert key in str(exc)
        return
    with pytest.raises(ConfigError) as info:
        cfg = load_config(raw)
        preflight(cfg, cfg.output_dir or tmp_path / "run")
    msg = str(info.value)
    assert key in msg and "\n" not in msg, msg
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "override",
    ["trainer.lr=-0.5", "trainer.lr=abc", "+trainer.lrr=1", "env.kwargs.dim_room=-3"],
)
def test_cli_rejects_a_bad_config_with_exit_code_2_and_no_traceback(tmp_path, override):
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "agentrl.train", override, f"output_dir={out}"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert override.lstrip("+").split("=")[0].rsplit(".", 1)[0] in proc.stderr
    assert not out.exists()


def test_presets_set_values_never_new_keys():
    schema = OmegaConf.structured(TrainConfig)
    for group in ("env", "credit", "model", "rollout", "trainer"):
        for path in sorted((CONFIG_DIR / group).glob("*.yaml")):
            data = OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}
            data.pop("defaults", None)
            merged = OmegaConf.merge(schema[group], data)  # raises on an unknown key
            assert merged is not None
