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
    ("overrides", "lr"),
    [
        ([], 2.5e-4),  # the tiny model's rate (docs/benchmarks.md: the report-seed comparison)
        (["model=smollm2-135m"], 5e-4),  # pretrained presets keep their measured rate
        (["model=path", "model.name=/some/model"], 5e-4),
        (["model.lr=1e-4"], 1e-4),
        (["model=smollm2-135m", "trainer.lr=1e-5"], 1e-5),  # an explicit trainer.lr wins
    ],
)
def test_the_learning_rate_comes_from_the_model_preset(overrides, lr):
    assert load_config(make_cfg(*overrides)).trainer.lr == pytest.approx(lr)


@pytest.mark.parametrize(
    "group", ["env", "credit", "model", "rollout", "trainer"], ids=lambda g: f"group={g}"
)
def test_every_preset_composes_and_checks(group):
    for name in options(group):
        extra = ["model.name=/tmp"] if (group, name) == ("model", "path") else []
        cfg = load_config(make_cfg(f"{group}={name}", *extra))
        assert isinstance(cfg, TrainConfig)


def test_model_path_without_a_name_is_refused():
    """``name: ???`` in configs/model/path.yaml is dropped by the merge over the default "tiny":
    without this check ``model=path`` alone silently trained the tiny model."""
    with pytest.raises(ConfigError) as info:
        load_config(make_cfg("model=path"))
    msg = str(info.value)
    assert "model.name" in msg and "model=path needs model.name=" in msg and "\n" not in msg, msg


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


# -- checked before any work ------------------------------------------------------------------------
def _int_fields(cls, prefix=""):
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            yield from _int_fields(type(default), f"{prefix}{f.name}.")
        elif str(f.type).split("|")[0].strip() == "int":
            yield f"{prefix}{f.name}"


@pytest.mark.parametrize("key", list(_int_fields(TrainConfig)))
def test_every_integer_key_is_bounded(key):
    """A size of 10**23 (a typo) is refused naming its key, for every int key of the config."""
    with pytest.raises(ConfigError) as info:
        load_config(OmegaConf.from_dotlist([f"{key}={10**23}"]))
    assert key in str(info.value) and "at most" in str(info.value), str(info.value)


def test_sizes_within_the_bound_still_load():
    cfg = load_config(
        OmegaConf.from_dotlist(["trainer.minibatch_size=2147483647", "seed=4294967296"])
    )
    assert cfg.trainer.minibatch_size == 2**31 - 1 and cfg.seed == 2**32


def test_zero_iterations_are_refused_pointing_to_evaluate():
    with pytest.raises(ConfigError) as info:
        load_config(make_cfg("trainer.iterations=0"))
    msg = str(info.value)
    assert "trainer.iterations" in msg and "agentrl.evaluate" in msg and "\n" not in msg


@pytest.mark.parametrize("name", ["grpo", "rloo", "gigpo", "hgpo", "salt"])
def test_group_credit_with_groups_of_one_is_refused(name, tmp_path):
    cfg = load_config(make_cfg(f"credit={name}", "rollout.group_size=1"))
    with pytest.raises(ConfigError) as info:
        preflight(cfg, tmp_path / "run")
    msg = str(info.value)
    assert "rollout.group_size=1" in msg and repr(name) in msg and "\n" not in msg, msg


def test_credit_with_a_critic_takes_groups_of_one(tmp_path):
    preflight(load_config(make_cfg("credit=gae", "rollout.group_size=1")), tmp_path / "run")


def test_group_based_declarations():
    from agentrl import credit

    assert credit.group_based("grpo") and credit.group_based("gigpo")
    assert not credit.group_based("gae") and not credit.group_based("hiper")
    assert credit.group_based("compose", base="grpo", terms=["gigpo"])
    assert not credit.group_based("compose", base="gae", terms=["gigpo"])  # gae has signal
    assert not credit.group_based("milestone", base="gae") and credit.group_based("milestone")


def test_constrained_actions_longer_than_the_budget_are_refused(tmp_path):
    """Sokoban's four directions are 4 tiny-model tokens each as <action>..</action>, stop token
    included: a budget of 3 can write none of them under constrained decoding."""
    cfg = load_config(make_cfg("model.max_new_tokens=3"))
    with pytest.raises(ConfigError) as info:
        preflight(cfg, tmp_path / "run")
    msg = str(info.value)
    assert "rollout.max_new_tokens=3" in msg and "rollout.max_new_tokens >= 4" in msg, msg
    assert "4 of 4 actions" in msg and "'up'" in msg and "\n" not in msg
    # unconstrained, the model may write something else: not a config error
    preflight(load_config(make_cfg("model.max_new_tokens=3", "model.constrained=false")), tmp_path)


def test_the_budget_rule_is_the_env_contracts():
    from agentrl.envs.contract import budget_failure

    assert budget_failure({"up": 3, "pick up key": 10}, 10) is None
    msg = budget_failure({"up": 3, "pick up key": 10, "open door": 9}, 8)
    assert msg == (
        "2 of 3 actions do not fit max_new_tokens=8: the longest, 'pick up key', takes 10 tokens "
        "(stop token included); set max_new_tokens >= 10"
    )


def test_lora_targets_are_checked_against_the_model():
    from agentrl.models import LoraTargetError, apply_lora, load_model

    model, _tok, _ = load_model("tiny")
    with pytest.raises(LoraTargetError) as info:
        apply_lora(model, r=2, alpha=4, target_modules=["q_proj", "no_such_proj"])
    msg = str(info.value)
    assert "'no_such_proj'" in msg and "q_proj" in msg and "v_proj" in msg and "\n" not in msg
    with pytest.raises(LoraTargetError, match="did you mean q_proj"):
        apply_lora(model, r=2, alpha=4, target_modules=["q_prj"])
    wrapped = apply_lora(model, r=2, alpha=4, target_modules="self_attn.q_proj,v_proj")
    assert any("lora_A" in n for n, _ in wrapped.named_parameters())


@pytest.mark.parametrize(
    "overrides",
    [
        ["trainer.iterations=0"],
        ["credit=grpo", "rollout.group_size=1"],
        ["model.lora.enabled=true", "model.lora.target_modules=[no_such_proj]"],
    ],
    ids=["iterations=0", "grpo-group_size=1", "lora-target"],
)
def test_cli_refuses_before_any_rollout_with_exit_2(tmp_path, overrides):
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentrl.train",
            *overrides,
            "trainer.progress=false",
            f"output_dir={out}",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    key = overrides[-1].split("=")[0]
    assert len(lines) == 1 and key in lines[0], proc.stderr
    assert not (out / "metrics.jsonl").exists() and not (out / "config.yaml").exists()
