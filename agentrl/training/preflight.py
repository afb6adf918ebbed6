"""Checks of a typed training config against the world, before the model loads or an env starts.

:func:`agentrl.config.load_config` checks types and ranges; :func:`preflight` checks what only the
world can answer: the env id and its keyword arguments (one env is built in this process and
dropped), its task splits, the model folder, the resume checkpoint, the device, the output
folder, and the credit module's options and declared inputs. Each problem is one line naming its
key (:class:`~agentrl.config.ConfigError`).
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from .. import credit, envs
from ..config import ConfigError, TrainConfig
from ..credit import token_shapers
from ..credit.synthetic import random_batch
from ..envs import contract
from ..envs.multiagent import is_multiagent
from ..envs.tools import tool, tools_problem
from ..methods import DEFAULT_FORMAT, action_format, format_hook, trainer_hooks
from ..methods.registry import TOOL_FORMAT, resolve_tool_syntax
from ..models import resolve_model_path
from ..pool import EnvPool, EnvSpec, backend_options
from ..rollout import ActionFormat, action_token_counter
from .checkpoint import CheckpointError, find_checkpoint
from .iteration import credit_options

__all__ = [
    "BUILTIN_MODELS",
    "budget_is_preset",
    "fit_response_budget",
    "preflight",
    "response_budget_problem",
]

BUILTIN_MODELS = ("tiny", "smollm2-135m", "smollm2-135m-instruct")


def preflight(cfg: TrainConfig, out: str | Path | None, fit_budget: bool = False) -> list[str]:
    """Raise :class:`ConfigError` listing every problem found (each naming its key).

    ``fit_budget``: ``rollout.max_new_tokens`` is the model preset's (:func:`budget_is_preset`),
    so a run whose action format is not the tag format gets the budget that format needs
    (:func:`fit_response_budget`, which sets it in ``cfg``). Returns the lines to print (what
    was set and why)."""
    problems = _credit(cfg) + _groups(cfg) + _env(cfg) + _servers(cfg) + _model(cfg)
    problems += _resume(cfg) + _device(cfg) + _out(out)
    notes = []
    if not problems:  # the tokenizer loads only for an otherwise sound config
        problems = _tool_template(cfg)
    if not problems and fit_budget:
        note = fit_response_budget(cfg)
        notes += [note] if note else []
    if not problems:
        problems = _budget(cfg)
    if problems:
        raise ConfigError("invalid config: " + "; ".join(problems))
    return notes


#: ``rollout.max_new_tokens`` as the config schema and every preset write it: the model's.
PRESET_BUDGET = "${model.max_new_tokens}"


def budget_is_preset(raw: Any) -> bool:
    """Whether a composed (unresolved) config leaves ``rollout.max_new_tokens`` to the model
    preset (no override, no experiment preset setting it)."""
    rollout = raw.get("rollout") if hasattr(raw, "get") else None
    if rollout is None:
        return True
    if isinstance(rollout, DictConfig):
        rollout = OmegaConf.to_container(rollout, resolve=False)
    value = rollout.get("max_new_tokens", PRESET_BUDGET) if isinstance(rollout, dict) else None
    return value == PRESET_BUDGET


def fit_response_budget(cfg: TrainConfig) -> str | None:
    """Give a run whose action format is not the tag format (a credit module's own, such as
    HiPER's; ``rollout.action_format=tool_call``) the response budget that format needs: the
    model preset's budget (``model.max_new_tokens``, sized for the tag format) plus the most
    tokens the format adds to an action of this env, and at least its longest action, counted
    with the run's tokenizer on the actions met from ``reset(seed=0)`` along the expert's path.
    Only a budget too small for the format's longest action is raised (a preset that sizes its
    budget for the format, e.g. 512 tokens of thought and call, keeps it). Sets
    ``cfg.rollout.max_new_tokens`` and returns the line saying so; ``None`` when nothing changes
    (the tag format, a budget that fits, a format that cannot be built here, no action to
    measure)."""
    r, e, m = cfg.rollout, cfg.env, cfg.model
    name, _hook = format_hook(cfg.credit.name, r.action_format)
    if name == DEFAULT_FORMAT:
        return None
    tok = _tokenizer(cfg)
    try:
        info, actions = _probe(e.id, dict(e.kwargs), e.max_steps, e.num_workers > 0, e.step_timeout)
        fmt = action_format(cfg, tok).bind(info)
    except Exception:  # noqa: BLE001 - the checks that follow name what is wrong
        return None
    tag = ActionFormat(**asdict(r.action))
    count_fmt, count_tag = action_token_counter(tok, fmt), action_token_counter(tok, tag)
    counts = {}
    for a in actions:
        try:
            counts[a] = (count_fmt(a), count_tag(a))
        except ValueError:  # an action the format cannot write (no tool writes it)
            continue
    if not counts:
        return None
    longest = max(counts, key=lambda a: counts[a][0])
    if r.max_new_tokens >= counts[longest][0]:  # a budget that writes every action is meant
        return None
    extra = max(f - t for f, t in counts.values())
    needed = max(m.max_new_tokens + extra, counts[longest][0])
    r.max_new_tokens = needed
    return (
        f"rollout.max_new_tokens={needed}: the {name} action format writes up to {extra} tokens "
        f"more than the tag format on {e.id} (its longest action, {longest[:40]!r}, takes "
        f"{counts[longest][0]}), on top of model.max_new_tokens={m.max_new_tokens} "
        "(set rollout.max_new_tokens to choose another budget)"
    )


_PROBE_TOOL = [tool("probe_tool_rendering", "A tool the template must show.", text="any text")]


def _tool_template(cfg: TrainConfig) -> list[str]:
    """The tool-call format needs a chat template that renders the tools (else the model never
    sees them) and, with ``rollout.tool_syntax=auto``, one that shows its call syntax."""
    name, _hook = format_hook(cfg.credit.name, cfg.rollout.action_format)
    if name != TOOL_FORMAT:
        return []
    tok, model = _tokenizer(cfg), cfg.model.name
    msgs = [{"role": "user", "content": "hello"}]
    try:
        plain = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        with_tools = tok.apply_chat_template(
            msgs, tools=_PROBE_TOOL, add_generation_prompt=True, tokenize=False
        )
    except Exception as exc:  # noqa: BLE001 - a template that cannot render is the finding
        return [f"rollout.action_format=tool_call: the chat template of model {model} cannot "
                f"render tools ({_line(exc)}); use rollout.action_format=tag"]  # fmt: skip
    if with_tools == plain or "probe_tool_rendering" not in with_tools:
        return [
            f"rollout.action_format=tool_call: the chat template of model {model} renders no "
            "tools (apply_chat_template ignores tools=...), so the model would never see the "
            "env's tools; use a model whose template renders them (model=tiny, Qwen2.5, Qwen3, "
            "Llama 3.1) or rollout.action_format=tag"
        ]
    if resolve_tool_syntax(cfg.rollout.tool_syntax, tok.chat_template) is None:
        return [
            f"rollout.tool_syntax=auto: the chat template of model {model} renders tools but "
            "shows neither <tool_call> nor Llama 3.1's JSON calls; set rollout.tool_syntax to "
            "hermes or llama3_json"
        ]
    return []


def _tokenizer(cfg: TrainConfig) -> Any:
    from transformers import AutoTokenizer

    m = cfg.model
    tiny = asdict(m.tiny) if m.tiny is not None and m.name == "tiny" else None
    return AutoTokenizer.from_pretrained(resolve_model_path(m.name, tiny))


def _credit(cfg: TrainConfig) -> list[str]:
    name = cfg.credit.name
    if name not in credit.available():
        return [
            f"credit.name {name!r} is not a credit module (available: {', '.join(credit.available())})"
        ]
    try:
        credit.check_option_names(name, cfg.credit.options)
    except credit.UnknownOptionError as exc:
        return [
            f"credit.options.{k} is not an option of credit module {name!r} (valid: {', '.join(exc.valid) or 'none'})"
            for k in exc.unknown
        ]
    try:
        format_hook(name, cfg.rollout.action_format)
    except ValueError as exc:
        return [f"rollout.action_format: {exc}"]
    try:
        wanted = credit.needs(name, **cfg.credit.options)
        hooks = trainer_hooks(name, wanted, cfg.credit.token, cfg.rollout.action_format)
    except Exception as exc:  # noqa: BLE001 - a malformed option (e.g. compose terms) ends here
        return [f"credit.options: {exc}"]
    supplied = hooks.supplies
    missing = sorted(wanted - supplied)
    if missing:
        return [
            f"credit.name {name!r} with these options needs step-batch input(s) {', '.join(missing)}, "
            f"which the trainer cannot supply (it supplies {', '.join(sorted(supplied))})"
        ]
    if cfg.credit.token is not None:
        if hooks.steps is not None and hooks.steps.sets_token_advantages:
            return [f"credit.token: credit module {name!r} puts its own advantages on the tokens "
                    "(its step hooks); a token shaper cannot reshape them (set credit.token=null)"]  # fmt: skip
        valid_t = token_shapers.options(cfg.credit.token)
        bad = sorted(set(cfg.credit.token_options) - set(valid_t))
        if bad:
            return [
                f"credit.token_options.{k} is not an option of token shaper {cfg.credit.token!r} "
                f"(valid: {', '.join(valid_t)})"
                for k in bad
            ]
    # A dry run on a small synthetic batch (with what the method's hooks would supply): the
    # module's own option checks answer now, not after the first rollout.
    try:
        batch = random_batch(n_groups=2, group_size=4, max_len=6, embedding_dim=8, seed=0)
        credit.compute(hooks.example(batch), name, **credit_options(cfg))
    except Exception as exc:  # noqa: BLE001 - every rejected option ends the same way
        msg = _line(exc)
        named = re.search(r"option '(\w+)'", msg)
        key = f"credit.options.{named.group(1)}" if named else "credit.options"
        return [f"{key} ({name}): {msg}"]
    return []


def _groups(cfg: TrainConfig) -> list[str]:
    """A group-based module (its baseline is the task group) with one rollout per group."""
    name = cfg.credit.name
    if cfg.rollout.group_size != 1 or name not in credit.available():
        return []
    try:
        grouped = credit.group_based(name, **cfg.credit.options)
    except Exception:  # noqa: BLE001 - a malformed option is _credit's to report
        return []
    if not grouped:
        return []
    return [
        f"rollout.group_size=1 with credit.name={name!r}: its baseline is the other rollouts of "
        "the task group, so groups of one give no advantage at all (set rollout.group_size >= 2, "
        "or a module with a critic: credit=gae)"
    ]


def _budget(cfg: TrainConfig) -> list[str]:
    """Under constrained decoding an admissible action longer than the response budget can never
    be written (:func:`response_budget_problem`, with the run's tokenizer)."""
    if not cfg.rollout.constrained:
        return []
    tok = _tokenizer(cfg)
    e = cfg.env
    problem = response_budget_problem(
        e.id, dict(e.kwargs), e.max_steps, cfg, tok, cfg.model.name, isolate=e.num_workers > 0,
        step_timeout=e.step_timeout,
    )  # fmt: skip
    return [problem] if problem else []


def response_budget_problem(
    env_id: str,
    kwargs: dict,
    max_steps: int,
    cfg: TrainConfig,
    tokenizer,
    model: str,
    key: str = "rollout.max_new_tokens",
    *,
    isolate: bool = False,
    step_timeout: float | None = None,
) -> str | None:
    """The env contract's budget rule (``agentrl.envs.contract.budget_failure``) on the actions
    met from ``reset(seed=0)`` along the expert's path, counted with ``tokenizer`` in the action
    format the runner of ``cfg`` writes (its credit module's), against
    ``cfg.rollout.max_new_tokens``; ``None`` when they fit, constrained decoding is off or the
    env lists no actions. ``key`` is the setting the line names (``agent.max_new_tokens`` in
    ``agentrl.evaluate``). Train and evaluate apply it alike. With ``isolate`` (the run keeps its
    envs in worker processes) the env is stepped in one worker of the process pool, under
    ``step_timeout``, so an env that crashes or hangs costs the probe, not this process."""
    r = cfg.rollout
    if not r.constrained:
        return None
    info, actions = _probe(env_id, kwargs, max_steps, isolate, step_timeout)
    if not actions:
        return None  # an open action space: nothing to constrain
    # the runner's action format (tag or tool call), bound to the env's tools as an episode is
    fmt = action_format(cfg, tokenizer).bind(info)
    count = action_token_counter(tokenizer, fmt)
    failure = contract.budget_failure({a: count(a) for a in actions}, r.max_new_tokens, key=key)
    if failure is None:
        return None
    return (
        f"{failure} (constrained decoding on {env_id}: a longer admissible action can never be "
        f"written; check every action with python -m agentrl.check_env {env_id} --model {model})"
    )


def _probe(
    env_id: str, kwargs: dict, max_steps: int, isolate: bool, step_timeout: float | None
) -> tuple[dict, list[str]]:
    """The reset info of ``reset(seed=0)`` and the actions met from there along the expert's
    path (``contract.actions_seen``); with ``isolate`` in one worker of a process pool."""
    if isolate:
        with EnvPool([EnvSpec(env_id, kwargs)], num_workers=1, step_timeout=step_timeout) as pool:
            env = _PoolEnv(pool)
            info = env.reset(seed=0)[1]
            return info, contract.actions_seen(env, seeds=(0,), max_steps=max_steps)
    env = envs.make(env_id, **kwargs)
    try:
        info = env.reset(seed=0)[1]
        return info, contract.actions_seen(env, seeds=(0,), max_steps=max_steps)
    finally:
        env.close()


class _PoolEnv:
    """Env 0 of a pool, as ``contract.actions_seen`` drives an env: a cut episode (the env
    crashed, hung, returned junk) raises, which ends the probe."""

    def __init__(self, pool: EnvPool):
        self.pool = pool

    def reset(self, *, seed: int | None = None):
        return self.pool.reset([0], [seed])[0]

    def step(self, action: str):
        r = self.pool.step([0], [action])[0]
        if "error" in r.info:
            raise RuntimeError(r.info["error"])
        return tuple(r)

    def expert_action(self) -> str:
        return self.pool.call([0], "expert_action")[0]


def _env(cfg: TrainConfig) -> list[str]:
    e = cfg.env
    try:
        env = envs.make(e.id, **dict(e.kwargs))
    except Exception as exc:  # noqa: BLE001 - any failure to build the env is a config problem
        return [_env_error(e.id, dict(e.kwargs), exc)]
    problems = []
    try:
        try:
            _obs, info = env.reset(seed=0)
        except Exception as exc:  # noqa: BLE001 - kwargs some envs only check on reset
            return [_env_error(e.id, dict(e.kwargs), exc)]
        if cfg.rollout.action_format == "tool_call":
            problem = tools_problem(info.get("tools"), info.get("tool_actions"))
            if problem:
                problems.append(
                    f"rollout.action_format=tool_call: env {e.id} has no usable tool "
                    f"declaration in its reset info ({problem}; see docs/envs/contract.md)"
                )
        if cfg.rollout.opponents:
            problems += _opponents(cfg, env, info)
        for key, split in (("env.eval_split", e.eval_split), ("env.train_tasks", e.train_tasks)):
            if split is None or (key == "env.train_tasks" and split == "seeds"):
                continue
            try:
                ids = env.task_ids(split, 1)
            except Exception as exc:  # noqa: BLE001
                problems.append(f"{key}={split!r}: {_line(exc)}")
                continue
            if not ids:
                problems.append(f"{key}={split!r}: the split lists no tasks")
    finally:
        env.close()
    return problems


def _opponents(cfg: TrainConfig, env: Any, info: dict) -> list[str]:
    """``rollout.opponents``: a multi-agent env whose training games are drawn by seed, no second
    opponent setting, and every bot named one the env plays (a reset with it, as training does)."""
    e, key = cfg.env, "rollout.opponents"
    if not is_multiagent(info):
        return [f"{key} needs a multi-agent env (its info names the agents); {e.id} is not one"]
    if e.train_tasks != "seeds":
        return [f"{key} draws an opponent per training game from its seed: it needs "
                f"env.train_tasks=seeds, got {e.train_tasks!r}"]  # fmt: skip
    if e.kwargs.get("opponent") not in (None, "self", ["self"]):
        return [f"{key} replaces env.kwargs.opponent={e.kwargs['opponent']!r} in training games: "
                "set only one of them"]  # fmt: skip
    problems = []
    for name in cfg.rollout.opponents:
        if name in ("self", "pool"):
            continue
        try:
            _obs, bot_info = env.reset(seed=0, options={"opponent": name})
        except Exception as exc:  # noqa: BLE001 - the env's own words on the spec
            problems.append(f"{key}: {name!r}: {_line(exc)}")
            continue
        seats = bot_info.get("seats")
        if not isinstance(seats, list) or len(seats) >= len(bot_info.get("agents") or ()):
            problems.append(f"{key}: {name!r}: {e.id} plays no seat itself with "
                            "reset(options={'opponent': ...}) (use self or pool)")  # fmt: skip
    return problems


def _servers(cfg: TrainConfig) -> list[str]:
    """``env.backend=http``: each server serves the run's env id and kwargs with a free session
    for every env the run puts on it (else the line says what to start instead)."""
    e = cfg.env
    if e.backend != "http":
        return []
    from ..pool.http import servers_problems  # the serve extra (httpx)

    try:
        token = backend_options(e)["http_token"]
    except ValueError as exc:
        return [str(exc)]
    n = cfg.rollout.tasks_per_iter * cfg.rollout.group_size
    return [
        f"env.http.urls: {p}"
        for p in servers_problems(list(e.http.urls), EnvSpec(e.id, dict(e.kwargs)), n, token)
    ]


def _env_error(env_id: str, kwargs: dict, exc: Exception) -> str:
    if isinstance(exc, envs.registry.EnvKwargsError):
        return f"env.kwargs.{exc.names[0]}: {exc}"
    msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else _line(exc)  # no repr quotes
    if isinstance(exc, TypeError) and "unexpected keyword argument" in msg:
        bad = msg.split("unexpected keyword argument")[-1].strip(" '\"")
        return f"env.kwargs.{bad} is not an option of {env_id} ({msg})"
    if "not found" in msg.lower() or "unknown environment" in msg.lower():
        return f"env.id={env_id!r}: {msg}"
    return f"env.kwargs for {env_id} {kwargs}: {type(exc).__name__}: {msg}"


def _model(cfg: TrainConfig) -> list[str]:
    name = cfg.model.name
    if name in BUILTIN_MODELS:
        return []
    path = Path(name).expanduser()
    if not path.is_dir():
        return [
            f"model.name={name!r}: no such folder (give tiny, smollm2-135m or a local Hugging Face model folder)"
        ]
    if not (path / "config.json").is_file():
        return [
            f"model.name={name!r}: the folder has no config.json (not a Hugging Face model folder)"
        ]
    return []


def _resume(cfg: TrainConfig) -> list[str]:
    if not cfg.trainer.resume:
        return []
    try:
        find_checkpoint(cfg.trainer.resume)
    except CheckpointError as exc:
        return [str(exc)]
    return []


def _device(cfg: TrainConfig) -> list[str]:
    dev = cfg.trainer.device
    if dev.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            return [f"trainer.device={dev!r}: no CUDA device is available (use auto or cpu)"]
        index = int(dev.split(":")[1]) if ":" in dev else 0
        if index >= torch.cuda.device_count():
            return [f"trainer.device={dev!r}: only {torch.cuda.device_count()} CUDA device(s)"]
    if dev == "mps":
        import torch

        if not torch.backends.mps.is_available():
            return ["trainer.device='mps': MPS is not available (use auto or cpu)"]
    return []


def _out(out: str | Path | None) -> list[str]:
    if out is None:
        return []
    path = Path(out).expanduser().absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        return [f"output_dir={str(out)!r}: {existing} is a file, not a folder"]
    try:  # the nearest existing folder must take a file (os.access is not enough for root)
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        return [f"output_dir={str(out)!r} is not writable ({existing}: {exc.strerror or exc})"]
    return []


def _line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
