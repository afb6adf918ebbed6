"""``python -m agentrl.evaluate``: evaluate an agent on an env's fixed evaluation set.

A Hydra app (config ``configs/evaluate.yaml``, groups ``env/`` and ``agent/``). It builds the
task list (``env.task_ids(split, episodes)`` or seeds), plays it with the agent through the env
pool, and writes to ``output_dir``: ``results.json`` (config, task ids, seeds, every episode and
every statistic), ``table.md``, ``success.png`` and ``traces/eval_<agent>.jsonl`` (the first
``traces`` episodes step by step, for ``python -m agentrl.view``); the table is also printed. If the run stops
early (an unreachable endpoint, a task that cannot start), the finished episodes are written to
``results.partial.json`` and the command exits with the reason.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from . import __version__, envs
from .config import INT_LIMIT, WIDE_INT_LIMIT
from .evaluation import Report, summarize
from .evaluation.agents import ExpertAgent, RandomAgent
from .evaluation.runner import Agent, EvaluationError, play_tasks
from .evaluation.tasks import make_tasks
from .evaluation.traces import TraceFile, episode_line
from .overrides import unknown_group_option
from .pool import backend_options

__all__ = ["build_agent", "evaluate", "main"]

AGENTS = ("random", "expert", "endpoint", "model")
_started: list[bool] = []  # set once Hydra has composed the config and called main()


def build_agent(agent_cfg: DictConfig, cfg: DictConfig) -> Agent | Any:
    """The agent named by ``agent_cfg.name`` (one of :data:`AGENTS`). ``model`` returns a
    :class:`~agentrl.evaluation.model_agent.ModelAgent`, which plays whole episodes itself
    (``run``) through the trainer's rollout loop; the others answer step by step."""
    name = agent_cfg.get("name")
    if name == "random":
        return RandomAgent(
            open_action=agent_cfg.get("open_action"),
            fill_templates=bool(agent_cfg.get("fill_templates", True)),
        )
    if name == "expert":
        return ExpertAgent()
    if name == "endpoint":
        from .evaluation.endpoint import EndpointAgent, EndpointError

        try:
            return EndpointAgent.from_config(agent_cfg, cfg)
        except EndpointError as exc:  # the server is down or not the one expected: one line
            raise EvaluationError(str(exc), []) from exc
    if name == "model":
        from .evaluation.model_agent import ModelAgent

        return ModelAgent.from_config(agent_cfg, cfg)
    raise ValueError(f"unknown agent {name!r}; choose one of {', '.join(AGENTS)} (agent=<name>)")


def _resolve(cfg: DictConfig) -> dict[str, Any]:
    """The settings actually used, with the env config's defaults filled in."""
    env = cfg.env
    for key in ("id", "kwargs"):
        if key not in env:
            raise ValueError(f"env config has no {key!r} (see docs/architecture.md, 'Env configs')")
    pick = lambda own, env_key, default=None: own if own is not None else env.get(env_key, default)  # noqa: E731
    settings = {
        "env": str(env.id),
        "env_kwargs": OmegaConf.to_container(env.kwargs, resolve=True) or {},
        "split": pick(cfg.split, "eval_split"),
        "episodes": pick(cfg.episodes, "eval_episodes"),
        "task_ids": list(cfg.task_ids) if cfg.task_ids is not None else None,
        "seed_base": env.get("eval_seed_base"),
        "repeats": _number(cfg.repeats, "repeats", int),
        "seed": _number(cfg.seed, "seed", int),
        "max_steps": pick(cfg.max_steps, "max_steps"),
        "num_envs": _number(cfg.num_envs, "num_envs", int),
        "num_workers": _number(pick(cfg.num_workers, "num_workers", 0) or 0, "num_workers", int),
        "step_timeout": pick(cfg.step_timeout, "step_timeout"),
        "confidence": _number(cfg.confidence, "confidence", float),
        "pool_options": backend_options(env),
    }
    if settings["task_ids"] is not None:
        settings["split"] = None
    return settings


class ConfigProblem(ValueError):
    """A bad setting found before any episode is played: exit 2 with this one line."""


def _check_env(s: dict[str, Any]) -> None:
    """Build the env once: an unknown id or a bad kwarg is a config problem, named."""
    try:
        envs.make(s["env"], **s["env_kwargs"]).close()
    except KeyError as exc:
        raise ConfigProblem(f"env.id={s['env']!r}: {exc.args[0] if exc.args else exc}") from None
    except envs.registry.EnvKwargsError as exc:
        raise ConfigProblem(f"env.kwargs.{exc.names[0]}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any failure to build the env is the config's
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigProblem(f"env {s['env']} with env.kwargs {s['env_kwargs']}: {msg}") from None


def _number(value: Any, key: str, kind: type) -> Any:
    """``value`` as ``kind`` (an int must be whole), or a config problem naming ``key``."""
    ok = not isinstance(value, bool) and isinstance(value, int | float)
    if ok and kind is int and (not math.isfinite(value) or value != int(value)):
        ok = False
    if not ok:
        raise ConfigProblem(
            f"{key} must be {'an integer' if kind is int else 'a number'}, got {value!r}"
        )
    return kind(value)


def _check_sizes(s: dict[str, Any]) -> None:
    """The counts and limits of the run, in range (as ``agentrl.train`` checks its own): a bad
    one is a config problem naming its key, before any env or model is built."""
    limit = INT_LIMIT
    rules = {  # key: (value, smallest, may be null)
        "num_envs": (s["num_envs"], 1, False),
        "repeats": (s["repeats"], 1, False),
        "episodes": (s["episodes"], 1, True),
        "max_steps": (s["max_steps"], 1, True),
        "num_workers": (s["num_workers"], 0, False),
    }
    for key, (value, low, nullable) in rules.items():
        if value is None and nullable:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= limit:
            raise ConfigProblem(f"{key} must be an integer in {low}..{limit}, got {value!r}")
    if not 0 <= s["seed"] <= WIDE_INT_LIMIT:
        raise ConfigProblem(f"seed must be an integer in 0..{WIDE_INT_LIMIT}, got {s['seed']}")
    if not 0 < s["confidence"] < 1:
        raise ConfigProblem(f"confidence must be in (0, 1), got {s['confidence']}")
    t = s["step_timeout"]
    if t is not None and not (isinstance(t, int | float) and math.isfinite(t) and t > 0):
        raise ConfigProblem(f"step_timeout must be a number of seconds > 0 or null, got {t!r}")


def _check_budget(agent: Any, s: dict[str, Any]) -> None:
    """agent=model under constrained decoding: the admissible actions must fit its response
    budget (the env contract's budget rule, as ``agentrl.train`` checks it), before any episode."""
    from .training.preflight import response_budget_problem

    problem = response_budget_problem(
        s["env"], s["env_kwargs"], s["max_steps"] or 10, agent.config, agent.tokenizer,
        agent.settings.model, key="agent.max_new_tokens",
    )  # fmt: skip
    if problem:
        raise ConfigProblem(problem)


def evaluate(cfg: DictConfig) -> Report:
    """Run the evaluation described by ``cfg`` and write its outputs; returns the report."""
    s = _resolve(cfg)
    _check_sizes(s)
    _check_env(s)
    out = Path(cfg.output_dir)
    try:  # a split, task id or count the env does not have is the config's problem
        tasks = make_tasks(
            s["env"],
            s["env_kwargs"],
            split=s["split"],
            episodes=s["episodes"],
            task_ids=s["task_ids"],
            seed_base=s["seed_base"],
            seed=s["seed"],
            repeats=s["repeats"],
        )
    except (ValueError, KeyError) as exc:
        raise ConfigProblem(
            exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        ) from None
    agent_cfg = OmegaConf.to_container(cfg.agent, resolve=True)
    meta = {
        "agent": str(cfg.agent.name),
        "agent_config": {k: v for k, v in agent_cfg.items() if k not in ("api_key",)},
        **{
            k: s[k]
            for k in ("env", "env_kwargs", "split", "episodes", "repeats", "seed", "max_steps")
        },
        "tasks": [t.to_dict() for t in tasks],
        "agentrl_version": __version__,
    }
    agent = build_agent(cfg.agent, cfg)
    if hasattr(agent, "settings"):  # the model agent: its actions must fit its budget
        try:
            _check_budget(agent, s)
        except ConfigProblem:
            agent.close()
            raise
    if hasattr(agent, "settings"):  # the model agent: its own settings, resolved from the run
        meta["agent_config"] = {**meta["agent_config"], "resolved": agent.settings.to_dict()}
    play = agent.run if hasattr(agent, "run") else (lambda *a, **k: play_tasks(*a, agent, **k))
    traced: dict[int, Any] = {}  # the first `traces` tasks' episodes, step by step
    n_traced = _number(cfg.get("traces", 0), "traces", int)

    def keep(index: int, episode: Any) -> None:
        if index < n_traced:
            traced[index] = episode

    try:
        records = play(
            s["env"],
            tasks,
            env_kwargs=s["env_kwargs"],
            num_envs=s["num_envs"],
            num_workers=s["num_workers"],
            max_steps=s["max_steps"],
            step_timeout=s["step_timeout"],
            progress=bool(cfg.progress),
            pool_options=s["pool_options"],
            on_result=keep,
        )
    except EvaluationError as exc:
        if exc.records:
            summarize(
                exc.records, meta={**meta, "stopped": str(exc)}, confidence=s["confidence"]
            ).to_json(out / "results.partial.json")
        raise
    finally:
        tok = getattr(agent, "tokenizer", None)
        decode = None if tok is None else (lambda ids: tok.decode(list(ids)))
        if traced:
            _write_traces(out, meta, s["env"], [traced[k] for k in sorted(traced)], decode)
        agent.close()
    report = summarize(records, meta=meta, confidence=s["confidence"])
    report.to_json(out / "results.json")
    (out / "table.md").write_text(report.table("markdown"))
    report.plot(out / "success.png", title=f"{meta['agent']} on {s['env']}")
    return report


def _write_traces(out: Path, meta: dict[str, Any], env: str, episodes: list, decode) -> None:
    """``<output_dir>/traces/eval_<agent>.jsonl``: the traced episodes step by step."""
    head = {"kind": "eval", "phase": f"evaluate_{meta['agent']}", "iteration": None, "env": env,
            "agent": meta["agent"], "split": meta["split"], "seed": meta["seed"]}  # fmt: skip
    with TraceFile(out / "traces", f"eval_{meta['agent']}", head) as f:
        for ep in episodes:
            f.write(episode_line(ep, env, decode=decode))


@hydra.main(version_base=None, config_path="pkg://agentrl.configs", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    _started.append(True)
    try:
        report = evaluate(cfg)
    except ConfigProblem as exc:
        print(f"invalid config: {exc}", file=sys.stderr)
        sys.exit(2)
    except (EvaluationError, ValueError, KeyError, FileNotFoundError, ImportError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc  # no repr quotes
        print(f"evaluation failed: {msg}", file=sys.stderr)
        if isinstance(exc, EvaluationError) and exc.records:
            print(
                f"{len(exc.records)} finished episodes written to {Path(cfg.output_dir) / 'results.partial.json'}",
                file=sys.stderr,
            )
        sys.exit(1)
    report.print()
    print(f"results: {Path(cfg.output_dir).resolve()}/results.json, table.md, success.png")


def cli() -> None:
    """Run :func:`main`; an unknown group option or a config Hydra cannot compose exits 2 (one
    line for the former), as ``agentrl.train`` does."""
    problem = unknown_group_option(sys.argv[1:])
    if problem:
        print(f"invalid config: {problem}", file=sys.stderr)
        sys.exit(2)
    try:
        main()
    except SystemExit as exc:
        if exc.code == 1 and not _started:
            sys.exit(2)
        raise


if __name__ == "__main__":
    cli()
