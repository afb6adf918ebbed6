"""Checks of the training config, run before any work: a bad value fails with its key named.

``check_config(cfg)`` resolves every interpolation and checks each known key's type and range;
it raises :class:`ConfigError` listing every problem (``trainer.lr must be > 0, got -1``), so a
typo never surfaces as a crash an hour into a run. Unknown keys in the ``trainer`` group are
errors too (a misspelt option would otherwise be silently ignored).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

__all__ = ["ConfigError", "check_config"]


class ConfigError(ValueError):
    """A config value is missing, of the wrong type or out of range."""


_MISSING = object()


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _int(lo: int | None = None) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        if not _is_int(v):
            return f"must be an integer, got {v!r}"
        if lo is not None and v < lo:
            return f"must be >= {lo}, got {v}"
        return None

    return check


def _num(
    lo: float | None = None, hi: float | None = None, lo_open: bool = False, hi_open: bool = False
) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        if not _is_num(v) or v != v:
            return f"must be a number, got {v!r}"
        if lo is not None and (v <= lo if lo_open else v < lo):
            return f"must be {'>' if lo_open else '>='} {lo}, got {v}"
        if hi is not None and (v >= hi if hi_open else v > hi):
            return f"must be {'<' if hi_open else '<='} {hi}, got {v}"
        return None

    return check


def _choice(*options: Any) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        return None if v in options else f"must be one of {', '.join(map(str, options))}, got {v!r}"

    return check


def _bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else f"must be true or false, got {v!r}"


def _str(v: Any) -> str | None:
    return None if isinstance(v, str) and v else f"must be a non-empty string, got {v!r}"


def _optional(check: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
    return lambda v: None if v is None else check(v)


def _mapping(v: Any) -> str | None:
    return None if isinstance(v, Mapping) else f"must be a mapping, got {v!r}"


def _regex(v: Any) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str):
        return f"must be a regular expression string, got {v!r}"
    try:
        rx = re.compile(v)
    except re.error as exc:
        return f"is not a valid regular expression ({exc})"
    return None if rx.groups >= 1 else "needs a capture group for the action"


def _device(v: Any) -> str | None:
    return (
        None
        if isinstance(v, str) and re.fullmatch(r"auto|cpu|cuda(:\d+)?|mps", v)
        else f"must be auto, cpu, cuda, cuda:N or mps, got {v!r}"
    )


RULES: dict[str, Callable[[Any], str | None]] = {
    "seed": _int(0),
    "env.id": _str,
    "env.kwargs": _mapping,
    "env.train_tasks": _str,
    "env.train_seed_high": _int(1),
    "env.eval_split": _optional(_str),
    "env.eval_episodes": _int(1),
    "env.max_steps": _int(1),
    "env.invalid_penalty": _num(),
    "env.num_workers": _int(0),
    "env.step_timeout": _optional(_num(0, lo_open=True)),
    "credit.name": _str,
    "credit.options": _mapping,
    "credit.value_head": _bool,
    "credit.embedding_layer": _optional(_int()),
    "model.name": _str,
    "model.dtype": _choice("float32", "bfloat16", "float16"),
    "model.lora.enabled": _bool,
    "model.lora.r": _int(1),
    "model.lora.alpha": _num(0, lo_open=True),
    "model.lora.dropout": _num(0, 1, hi_open=True),
    "model.max_new_tokens": _int(1),
    "model.max_prompt_tokens": _int(1),
    "model.constrained": _bool,
    "model.gradient_checkpointing": _bool,
    "rollout.backend": _choice("hf", "vllm"),
    "rollout.tasks_per_iter": _int(1),
    "rollout.group_size": _int(1),
    "rollout.max_new_tokens": _int(1),
    "rollout.temperature": _num(0, lo_open=True),
    "rollout.top_p": _num(0, 1, lo_open=True),
    "rollout.top_k": _int(0),
    "rollout.eval_temperature": _num(0),
    "rollout.constrained": _bool,
    "rollout.max_batch_size": _int(1),
    "rollout.max_batch_tokens": _optional(_int(1)),
    "rollout.embedding_layer": _optional(_int()),
    "rollout.prompt.instruction": _bool,
    "rollout.prompt.history": _int(-1),
    "rollout.prompt.admissible_actions": _bool,
    "rollout.prompt.observation_prefix": lambda v: (
        None if isinstance(v, str) else f"must be a string, got {v!r}"
    ),
    "rollout.prompt.max_prompt_tokens": _int(1),
    "rollout.prompt.system_role": _bool,
    "rollout.action.pattern": _regex,
    "rollout.action.template": lambda v: (
        None
        if isinstance(v, str) and "{action}" in v
        else f"must be a string containing {{action}}, got {v!r}"
    ),
    "rollout.action.think": _bool,
    "rollout.action.require_think": _bool,
    "trainer.iterations": _int(0),
    "trainer.lr": _num(0, lo_open=True),
    "trainer.weight_decay": _num(0),
    "trainer.epochs": _int(1),
    "trainer.minibatch_size": _int(1),
    "trainer.micro_batch_size": _int(1),
    "trainer.micro_batch_tokens": _optional(_int(1)),
    "trainer.clip_low": _num(0, 1, hi_open=True),
    "trainer.clip_high": _num(0),
    "trainer.loss_agg": _choice("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"),
    "trainer.max_grad_norm": _num(0),
    "trainer.kl_coef": _num(0),
    "trainer.kl_estimator": _choice("k1", "k3"),
    "trainer.entropy_coef": _num(),
    "trainer.value_coef": _num(0),
    "trainer.value_lr": _optional(_num(0, lo_open=True)),
    "trainer.value_clip": _optional(_num(0, lo_open=True)),
    "trainer.dtype": _choice("auto", "float32", "bfloat16"),
    "trainer.device": _device,
    "trainer.num_threads": _optional(_int(1)),
    "trainer.eval_every": _int(0),
    "trainer.eval_initial": _bool,
    "trainer.checkpoint_every": _int(0),
    "trainer.keep_checkpoints": _int(1),
    "trainer.resume": _optional(_str),
    "trainer.progress": _bool,
    "trainer.tensorboard": _bool,
    "trainer.plot": _bool,
}

#: Keys a config may omit (their defaults apply).
OPTIONAL = {
    "env.eval_seed_base",
    "rollout.embedding_layer",
    "rollout.max_batch_tokens",
    "credit.value_head",
    "credit.embedding_layer",
    "trainer.num_threads",
    "trainer.micro_batch_tokens",
    "model.gradient_checkpointing",
}


def _get(cfg: DictConfig, key: str) -> Any:
    try:
        value = OmegaConf.select(cfg, key, default=_MISSING, throw_on_missing=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{key}: {str(exc).splitlines()[0]}") from exc
    if isinstance(value, DictConfig):
        return OmegaConf.to_container(value, resolve=True)
    if OmegaConf.is_list(value):
        return list(OmegaConf.to_container(value, resolve=True))
    return value


def check_config(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` naming every bad key of ``cfg`` (see :data:`RULES`)."""
    problems: list[str] = []
    for key, rule in RULES.items():
        try:
            value = _get(cfg, key)
        except ConfigError as exc:
            problems.append(str(exc))
            continue
        if value is _MISSING:
            if key not in OPTIONAL and not (
                key.startswith("rollout.") and cfg.get("rollout", {}).get("backend") == "vllm"
            ):
                problems.append(f"{key} is missing")
            continue
        msg = rule(value)
        if msg:
            problems.append(f"{key} {msg}")
    known = {k.split(".", 1)[1] for k in RULES if k.startswith("trainer.")}
    for key in cfg.get("trainer") or {}:
        if key not in known:
            problems.append(
                f"trainer.{key} is not a trainer option (valid: {', '.join(sorted(known))})"
            )
    if not problems:
        problems += _check_credit(cfg)
        problems += _check_cross(cfg)
    if problems:
        raise ConfigError("invalid config:\n  " + "\n  ".join(problems))


def _check_credit(cfg: DictConfig) -> list[str]:
    from agentrl import credit

    name = cfg.credit.name
    if name not in credit.available():
        return [
            f"credit.name {name!r} is not a credit module (available: {', '.join(credit.available())})"
        ]
    valid = credit.options(name)
    given = OmegaConf.to_container(cfg.credit.options, resolve=True) or {}
    unknown = sorted(set(given) - set(valid))
    if unknown:
        return [
            f"credit.options.{k} is not an option of credit module {name!r} (valid: {', '.join(valid) or 'none'})"
            for k in unknown
        ]
    return []


def _check_cross(cfg: DictConfig) -> list[str]:
    out = []
    t, r = cfg.trainer, cfg.rollout
    if t.micro_batch_size > t.minibatch_size:
        out.append(
            f"trainer.micro_batch_size ({t.micro_batch_size}) must be <= trainer.minibatch_size ({t.minibatch_size})"
        )
    if r.action.require_think and not r.action.think:
        out.append("rollout.action.require_think needs rollout.action.think=true")
    if (
        cfg.env.eval_split is None
        and OmegaConf.select(cfg, "env.eval_seed_base", default=None) is None
    ):
        out.append("env.eval_seed_base is needed when env.eval_split is null")
    return out
