"""The ``model`` agent: a trained checkpoint or any local model, played by the trainer's own loop.

Episodes run through :class:`agentrl.rollout.runner.EpisodeRunner`, the runner training uses (the
same prompt builder, chat template, generation backend, constrained decoding, action parser and
records), in chunks of ``num_envs`` tasks, so a checkpoint is evaluated exactly as training
evaluates it: with ``seed`` and ``num_envs`` equal to the run's ``seed`` and pool size
(``rollout.tasks_per_iter * rollout.group_size``), the per-episode records are the trainer's.

``agent.path`` may be:

- a training run folder (with ``config.yaml`` and ``checkpoints/final``), or its
  ``checkpoints/final``: the model is that folder, and the prompt, action format, token limits,
  constrained decoding and backend settings are the run's own (``rollout`` and ``model`` of its
  ``config.yaml``), and so is the credit module (``credit.name``), whose action format and
  prompt hint the runner plays with, as in training (:func:`agentrl.methods.build_runner`);
- ``tiny`` / ``smollm2-135m`` (the built-in models, settings from ``configs/model/<name>.yaml``)
  or any local Hugging Face folder (settings from ``configs/model/path.yaml``).

Keys of ``agent.prompt`` / ``agent.action`` / ``agent.backend_options`` override those settings,
and ``agent.credit`` the credit module whose action format the model writes. A hand setting that
differs from the training run's is kept and reported (one logged line, and ``mismatches`` in the
results' meta): the run is no longer evaluated as it was trained.

``agent=endpoint agent.path=RUN`` resolves its settings here too (:func:`resolve_model_settings`
is the one reader of a run's config) and plays through the same runner, with generation by a
served copy of the model (:class:`agentrl.backends.remote.CompletionsBackend`).

Sampling is greedy by default; with ``temperature > 0`` the chunk starting at task ``start``
samples with ``chunk_seed(eval_seed(seed), start)`` (the trainer's held-out evaluation rule; the
backend seeds request ``i`` from it), so a rerun with the same ``num_envs`` is identical.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf
from transformers import AutoTokenizer

from ..backends import Backend, make_backend
from ..config import ConfigError, TrainConfig, load_config
from ..methods import build_runner, format_hook
from ..models import load_model, resolve_model_path
from ..pool import EnvPool, EnvSpec, make_pool
from ..rollout.runner import EpisodeRunner, eval_seed
from .records import EpisodeRecord, record_from_rollout
from .runner import EvaluationError, _progress
from .tasks import EvalTask, eval_resets

__all__ = ["ModelAgent", "ModelSettings", "resolve_model_settings"]

log = logging.getLogger(__name__)

_PROMPT_KEYS = (
    "instruction",
    "history",
    "admissible_actions",
    "observation_prefix",
    "history_prefix",
    "actions_prefix",
    "response_hint",
    "system_role",
    "max_prompt_tokens",
    "context",
)
_ACTION_KEYS = ("pattern", "template", "think", "require_think", "max_action_chars")


@dataclass
class ModelSettings:
    """Everything the model agent needs, resolved from ``agent.*`` and the run's config."""

    model: str  # a folder, or a built-in name for agentrl.models.load_model
    source: str  # where the settings came from (for the results' meta)
    backend: str = "hf"
    prompt: dict[str, Any] = field(default_factory=dict)
    action: dict[str, Any] = field(default_factory=dict)
    max_new_tokens: int = 64
    constrained: bool = False
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    dtype: str = "float32"
    device: str = "auto"
    tiny: dict[str, Any] | None = None
    backend_options: dict[str, Any] = field(default_factory=dict)
    credit: str = "gigpo"  # the credit module the model was trained with (its action format)
    action_format: str = "default"  # the format that module asks for (resolved, for the record)
    rollout_format: str = "tag"  # rollout.action_format the model was trained with (tag, tool_call)
    tool_syntax: str = "auto"  # rollout.tool_syntax
    mismatches: list[str] = field(default_factory=list)  # hand settings that differ from the run's

    def mismatch_line(self, agent: str = "model") -> str | None:
        """One line naming the hand settings that differ from the training run's, or ``None``."""
        if not self.mismatches:
            return None
        return (
            f"agent={agent}: settings differ from the training run {self.source} "
            f"(its config.yaml): {'; '.join(self.mismatches)}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}

    def runner_config(self) -> TrainConfig:
        """These settings as the typed config :func:`agentrl.methods.build_runner` reads: the
        rollout's prompt, action settings, token cap, sampling truncation and constrained
        decoding, and the credit module whose action format the runner plays."""
        rollout = {
            "prompt": self.prompt,
            "action": self.action,
            "max_new_tokens": self.max_new_tokens,
            "constrained": self.constrained,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "action_format": self.rollout_format,
            "tool_syntax": self.tool_syntax,
        }
        try:
            return load_config({"credit": {"name": self.credit}, "rollout": rollout})
        except ConfigError as exc:  # the keys are rollout's; the values came from here
            raise ValueError(f"agent=model settings ({self.source}): {exc}") from None


def _preset_config(preset: str, name: str):
    """The typed training config with model preset ``preset`` (a file of the packaged configs)
    over the schema's defaults: the rollout settings a model of that family trains with."""
    text = resources.files("agentrl.configs").joinpath(preset).read_text()
    model = OmegaConf.to_container(OmegaConf.create(text), resolve=False) or {}
    model.pop("defaults", None)
    return load_config({"model": {**model, "name": name}})


def _plain(d: Mapping[str, Any] | None, keys: Sequence[str]) -> dict[str, Any]:
    return {
        k: d[k]
        for k in keys
        if d is not None and k in d and not (isinstance(d[k], str) and "${" in d[k])
    }


def _run_dir(path: Path) -> Path | None:
    """The training run folder ``path`` belongs to, if any."""
    for cand in (path, path.parent.parent):
        if (cand / "config.yaml").is_file() and (cand / "checkpoints" / "final").is_dir():
            return cand
    return None


#: Settings a training run fixes, compared with the hand settings (``mismatches``).
_RUN_SCALARS = ("max_new_tokens", "constrained", "dtype", "credit", "backend")


def _differences(run: ModelSettings, s: ModelSettings, scalars: Sequence[str]) -> list[str]:
    """``key=value (the run's: value)`` for each setting of ``s`` that differs from ``run``."""
    out = []
    for group in ("prompt", "action"):
        ran, now = getattr(run, group), getattr(s, group)
        for key in sorted(set(ran) | set(now)):
            if key in now and ran.get(key) != now[key]:
                out.append(f"{group}.{key}={now[key]!r} (the run's: {ran.get(key)!r})")
    for key in scalars:
        if getattr(run, key) != getattr(s, key):
            out.append(f"{key}={getattr(s, key)!r} (the run's: {getattr(run, key)!r})")
    return out


def resolve_model_settings(
    agent_cfg: Mapping[str, Any],
    agent: str = "model",
    run_scalars: Sequence[str] = _RUN_SCALARS,
) -> ModelSettings:
    """Settings for ``agent=model`` (see the module docstring for the precedence), and for
    ``agent=endpoint`` with ``agent.path`` (``agent`` names it in messages; ``run_scalars`` are
    the settings it compares with the run's, besides the prompt and action keys)."""
    raw = agent_cfg.get("path")
    if not raw:
        raise ValueError(
            f"agent={agent} needs agent.path (a training run folder, a model folder, tiny or smollm2-135m)"
        )
    path = Path(str(raw)).expanduser()
    run = _run_dir(path) if path.exists() else None
    if run is not None:
        run_cfg = OmegaConf.load(run / "config.yaml")
        try:
            rollout = OmegaConf.to_container(run_cfg.rollout, resolve=True)
            model = OmegaConf.to_container(run_cfg.model, resolve=True)
            credit_name = str(OmegaConf.select(run_cfg, "credit.name", default="gigpo"))
        except Exception as exc:
            raise ValueError(
                f"{run / 'config.yaml'}: cannot read its rollout/model settings ({exc})"
            ) from exc
        s = ModelSettings(
            model=str(run / "checkpoints" / "final"),
            source=str(run),
            backend=str(rollout.get("backend", "hf")),
            prompt=_plain(rollout.get("prompt"), _PROMPT_KEYS),
            action=_plain(rollout.get("action"), _ACTION_KEYS),
            max_new_tokens=int(rollout.get("max_new_tokens", 64)),
            constrained=bool(rollout.get("constrained", False)),
            dtype=str(model.get("dtype", "float32")),
            backend_options={
                k: v
                for k, v in rollout.items()
                if k not in ("prompt", "action", "action_format", "tool_syntax")
            },
            credit=credit_name,
            rollout_format=str(rollout.get("action_format", "tag")),
            tool_syntax=str(rollout.get("tool_syntax", "auto")),
        )
    else:
        name = str(raw)
        preset = {"tiny": "model/tiny.yaml", "smollm2-135m": "model/smollm2-135m.yaml"}.get(
            name, "model/path.yaml"
        )
        if name not in ("tiny", "smollm2-135m") and not path.exists():
            raise ValueError(
                f"agent.path={name!r}: no such folder (give a training run, a model folder, tiny or smollm2-135m)"
            )
        cfg = _preset_config(preset, name)
        rollout = asdict(cfg.rollout)
        rollout.pop("action_format", None)
        rollout.pop("tool_syntax", None)
        s = ModelSettings(
            model=name,
            source=preset,
            prompt=rollout.pop("prompt"),
            action=rollout.pop("action"),
            max_new_tokens=cfg.rollout.max_new_tokens,
            constrained=cfg.rollout.constrained,
            dtype=cfg.model.dtype,
            tiny=asdict(cfg.model.tiny) if name == "tiny" and cfg.model.tiny else None,
            backend_options=rollout,
        )
    trained = None
    if run is not None:
        trained = ModelSettings(
            **{**s.__dict__, "prompt": dict(s.prompt), "action": dict(s.action)}
        )
    if agent_cfg.get("backend"):
        s.backend = str(agent_cfg["backend"])
    if s.backend not in ("hf", "vllm"):
        raise ValueError(f"agent.backend must be hf or vllm, got {s.backend!r}")
    s.backend_options = {
        **s.backend_options,
        **dict(agent_cfg.get("backend_options") or {}),
        "backend": s.backend,
    }
    s.prompt.update(dict(agent_cfg.get("prompt") or {}))
    s.action.update(dict(agent_cfg.get("action") or {}))
    for key, attr in (("action_format", "rollout_format"), ("tool_syntax", "tool_syntax")):
        if agent_cfg.get(key) is not None:
            setattr(s, attr, str(agent_cfg[key]))
    for key in (
        "max_new_tokens",
        "constrained",
        "temperature",
        "top_p",
        "top_k",
        "dtype",
        "device",
        "credit",
    ):
        if agent_cfg.get(key) is not None:
            setattr(s, key, type(getattr(s, key))(agent_cfg[key]))
    try:
        s.action_format = format_hook(s.credit, s.rollout_format)[0]
    except ValueError as exc:
        raise ValueError(f"agent.action_format={s.rollout_format!r}: {exc}") from None
    except KeyError as exc:  # an unknown credit module (or a format no trainer module registers)
        raise ValueError(f"agent.credit={s.credit!r}: {exc.args[0]}") from None
    if trained is not None:
        s.mismatches = _differences(trained, s, run_scalars)
    return s


def _seed(cfg: Any) -> int:
    """The evaluation's ``seed`` (0 without a config)."""
    return int(cfg.seed) if cfg is not None and "seed" in cfg else 0


class ModelAgent:
    """A model played by the trainer's rollout loop (not a per-step :class:`Agent`: the loop owns
    prompting, generation and parsing). Build with :meth:`from_config`, then :meth:`run`."""

    name = "model"

    def __init__(
        self,
        settings: ModelSettings,
        seed: int = 0,
        *,
        backend: Backend | None = None,
        name: str = "model",
    ):
        """``backend``: generate with it (e.g. a served model's
        :class:`~agentrl.backends.remote.CompletionsBackend`) instead of loading the model; only
        the tokenizer is loaded then. ``name`` names the agent in messages."""
        self.settings, self.seed, self.name = settings, int(seed), name
        self.config = settings.runner_config()  # checked before the model loads
        device = settings.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if backend is not None:  # generation is elsewhere: only the tokenizer is needed here
            path = resolve_model_path(settings.model, settings.tiny)
            model, tok = None, AutoTokenizer.from_pretrained(path)
            if tok.pad_token_id is None:
                tok.pad_token = tok.eos_token
        elif settings.backend == "hf":
            model, tok, path = load_model(
                settings.model, tiny=settings.tiny, dtype=settings.dtype, device=device
            )
            model.eval()
        else:  # vLLM loads the weights itself; only the tokenizer is needed here
            path = resolve_model_path(settings.model, settings.tiny)
            model, tok = None, AutoTokenizer.from_pretrained(path)
            if tok.pad_token_id is None:
                tok.pad_token = tok.eos_token
        self.model_path, self.tokenizer = path, tok
        if backend is None:
            backend = make_backend(
                settings.backend_options, model, tok, model_path=path, seed=self.seed
            )
        self.backend = backend
        line = settings.mismatch_line(name)
        if line:
            log.warning(line)

    @classmethod
    def from_config(cls, agent_cfg: Any, cfg: Any = None) -> ModelAgent:
        c = (
            OmegaConf.to_container(agent_cfg, resolve=True)
            if not isinstance(agent_cfg, dict)
            else dict(agent_cfg)
        )
        return cls(resolve_model_settings(c), seed=_seed(cfg))

    def runner(self, pool: EnvPool, max_steps: int, env: str | None = None) -> EpisodeRunner:
        """The episode runner on ``pool`` of ``env``: built as training builds its own (same
        builder; ``Agent-v0``'s runner plays the user's program through the gateway)."""
        cfg = self.config
        if env is not None:
            cfg = replace(cfg, env=replace(cfg.env, id=env))
        return build_runner(cfg, pool, self.backend, self.tokenizer, max_steps=max_steps)

    def run(
        self,
        env: str,
        tasks: Sequence[EvalTask],
        *,
        env_kwargs: Mapping[str, Any] | None = None,
        num_envs: int = 8,
        num_workers: int = 0,
        max_steps: int | None = None,
        step_timeout: float | None = None,
        progress: bool = False,
        pool_options: Mapping[str, Any] | None = None,
        on_result: Callable[[int, Any], None] | None = None,
    ) -> list[EpisodeRecord]:
        """Play every task once, ``num_envs`` at a time; records in task order. ``pool_options``
        go to :func:`agentrl.pool.make_pool` (``backend="ray"`` and its actor settings);
        ``on_result(task index, episode)`` gets each finished ``EpisodeResult`` (traces)."""
        if max_steps is None or max_steps < 1:
            raise ValueError(
                f"agent={self.name} needs a step cap (max_steps >= 1), got {max_steps}"
            )
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        tasks = list(tasks)
        if not tasks:
            return []
        s = self.settings
        n = min(num_envs, len(tasks))
        pool = make_pool(
            [EnvSpec(env, dict(env_kwargs or {}))] * n,
            num_workers=min(num_workers, n),
            step_timeout=step_timeout,
            **dict(pool_options or {}),
        )
        runner = self.runner(pool, int(max_steps), env)
        bar, bar_task = _progress(len(tasks), progress, f"{self.name} on {env}")
        records: dict[int, EpisodeRecord] = {}  # by task index, as each episode ends

        def record(k: int, ep: Any) -> None:
            records[k] = record_from_rollout(ep, env)
            if on_result is not None:
                on_result(k, ep)
            if bar is not None:
                wins = sum(r.won for r in records.values())
                bar.update(bar_task, advance=1, status=f"success {wins}/{len(records)}")

        def played() -> list[EpisodeRecord]:
            return [records[k] for k in sorted(records)]

        try:
            if bar is not None:
                bar.start()
            runner.play(
                eval_resets(tasks),
                temperature=s.temperature,
                seed=eval_seed(self.seed),
                on_episode=record,
            )
        except Exception as exc:
            raise EvaluationError(
                f"{self.name} agent failed on {env}: {type(exc).__name__}: {exc}", played()
            ) from exc
        finally:
            if bar is not None:
                bar.stop()
            pool.close()  # the backend is the agent's: close() releases it
        return played()

    def close(self) -> None:
        self.backend.close()
