"""``python -m agentrl.check_env ENV``: run the agentrl env contract on a registered env.

``ENV`` is an env id (``Sokoban-v0``, ``agentrl/MyEnv-v0``, a plug-in's id) or the name of an env
config (``sokoban``, ``webshop``...: its id, kwargs and step limit). Prints one PASS / FAIL /
SKIP line per rule of :mod:`agentrl.envs.contract` with the offending case, then a summary::

    python -m agentrl.check_env Sokoban-v0 --kwargs dim_room=6 num_boxes=2
    python -m agentrl.check_env sokoban --model tiny           # the default run's settings
    python -m agentrl.check_env GuessNumber-v0 --model /path/to/hf-model --max-new-tokens 16

The ``budget`` rule renders every admissible action met (and the expert's actions) with the
training run's action format and counts the model's tokens, stop token included, against the
response budget: ``--max-new-tokens``, else the model preset's ``max_new_tokens``. Without
``--model`` it is skipped.

Exit codes: 0 every rule passed; 1 a rule failed; 2 bad usage (unknown env or config, bad kwargs).
The rules live in ``agentrl.envs.contract`` (importing nothing else from agentrl); this entry
point adds the model's tokenizer and action format, which the env package must not import.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from importlib import resources
from typing import Any

from omegaconf import OmegaConf

from . import envs
from .config import ConfigError, load_config
from .envs.contract import RULES, check_contract
from .envs.registry import parse_kwargs

__all__ = ["main", "token_counter"]

MODEL_PRESETS = ("tiny", "smollm2-135m")


class UsageError(ValueError):
    """A bad command line: exit 2 with this one line."""


def _presets(group: str) -> list[str]:
    folder = resources.files("agentrl.configs").joinpath(group)
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def _preset(group: str, name: str) -> dict[str, Any]:
    text = resources.files("agentrl.configs").joinpath(group, f"{name}.yaml").read_text()
    data = OmegaConf.to_container(OmegaConf.create(text), resolve=False) or {}
    data.pop("defaults", None)
    return data


def resolve_env(name: str, kwargs: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``(env id, kwargs, settings)`` for an env id or an env config name; ``settings`` holds the
    config's ``max_steps`` and ``eval_split`` (empty for a bare id)."""
    if name in _presets("env"):
        e = _preset("env", name)
        settings = {k: e[k] for k in ("max_steps", "eval_split") if k in e}
        return e["id"], {**(e.get("kwargs") or {}), **kwargs}, settings
    try:
        envs.registry.resolve_id(name)
    except KeyError as exc:
        close = difflib.get_close_matches(name, _presets("env"), n=1)
        hint = f"; or the env config {close[0]!r}?" if close else ""
        raise UsageError(f"{exc.args[0]}{hint}") from None
    return name, kwargs, {}


def token_counter(model: str, overrides: dict[str, Any] | None = None) -> tuple[Callable, int]:
    """``(count, max_new_tokens)``: the model's token count of an action as the rollout writes
    it (the action format's rendering, stop token included), and the preset's response budget."""
    from transformers import AutoTokenizer  # the train extra, like the two below

    from .models import resolve_model_path
    from .rollout import ActionFormat, action_token_counter

    section = _preset("model", model) if model in MODEL_PRESETS else {"name": model}
    section["name"] = model if model not in MODEL_PRESETS else section.get("name", model)
    cfg = load_config({"model": section, **(overrides or {})})
    tiny = (
        asdict(cfg.model.tiny) if cfg.model.tiny is not None and cfg.model.name == "tiny" else None
    )
    tok = AutoTokenizer.from_pretrained(resolve_model_path(cfg.model.name, tiny))
    fmt = ActionFormat(**asdict(cfg.rollout.action))
    return action_token_counter(tok, fmt), int(cfg.rollout.max_new_tokens)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m agentrl.check_env",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("env", help="env id or env config name (e.g. Sokoban-v0, sokoban)")
    ap.add_argument("--kwargs", nargs="*", default=[], metavar="KEY=VALUE", help="env kwargs")
    ap.add_argument("--model", help="tiny, smollm2-135m or a local model folder (budget rule)")
    ap.add_argument("--max-new-tokens", type=int, help="response budget (default: the model's)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="reset seeds")
    ap.add_argument("--max-steps", type=int, help="step limit (default: the env config's, or 50)")
    ap.add_argument("--split", help="split whose ids must replay (default: the config's or test)")
    ap.add_argument("--rules", nargs="+", choices=RULES, default=list(RULES))
    args = ap.parse_args(argv)
    try:
        env_id, kwargs, settings = resolve_env(args.env, parse_kwargs(args.kwargs))
        try:
            envs.make(env_id, **kwargs).close()
        except Exception as exc:  # noqa: BLE001 - any failure to build is a usage problem
            msg = f"env {env_id} with kwargs {kwargs}: {type(exc).__name__}: {exc}"
            raise UsageError(msg) from None
        count, budget = None, args.max_new_tokens
        if args.model:
            count, preset_budget = token_counter(args.model)
            budget = budget or preset_budget
    except (UsageError, ConfigError, ValueError) as exc:
        print(f"check_env: {exc}", file=sys.stderr)
        return 2
    results = check_contract(
        lambda: envs.make(env_id, **kwargs),
        seeds=args.seeds,
        max_steps=args.max_steps or settings.get("max_steps", 50),
        split=args.split or settings.get("eval_split") or "test",
        token_count=count,
        max_new_tokens=budget,
        rules=args.rules,
    )
    print(f"agentrl env contract: {env_id} {kwargs or ''}".rstrip())
    for r in results:
        print(r.line())
    failed = [r.rule for r in results if r.ok is False]
    passed = sum(r.ok is True for r in results)
    skipped = sum(r.ok is None for r in results)
    print(f"{passed} passed, {len(failed)} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
