"""Environment registration: built-ins, third-party plug-ins, and ``envs.make``.

Built-in envs are registered with Gymnasium under the ``agentrl/`` namespace when ``envs`` is
imported. Third-party packages register theirs through the ``agentrl.envs`` entry-point group:
each entry point names a zero-argument callable that calls :func:`register` (or
``gymnasium.register``). Plug-ins are loaded once, on the first :func:`make` or
:func:`list_envs`.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import inspect
import warnings
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import yaml
from gymnasium.envs.registration import load_env_creator

NAMESPACE = "agentrl"
ENTRY_POINT_GROUP = "agentrl.envs"

#: Built-in env ids and their entry points (imported on first make: an env's heavy dependencies
#: load only when it is used).
BUILTIN: dict[str, str] = {
    "Sokoban-v0": "agentrl.envs.sokoban:SokobanEnv",
    "FrozenLake-v0": "agentrl.envs.adapter:make_frozen_lake",
    "WebShop-v0": "agentrl.envs.webshop:WebShopEnv",
    "ALFWorld-v0": "agentrl.envs.alfworld.env:ALFWorldEnv",
    "TextWorld-v0": "agentrl.envs.textworld.env:TextWorldEnv",
    "OpenEnv-v0": "agentrl.envs.openenv.client:OpenEnvEnv",
    "Search-v0": "agentrl.envs.search.env:SearchEnv",
    "OpenSpiel-v0": "agentrl.envs.openspiel.env:OpenSpielEnv",
    "TicTacToe-v0": "agentrl.envs.openspiel.env:tic_tac_toe",
    "ConnectFour-v0": "agentrl.envs.openspiel.env:connect_four",
    "KuhnPoker-v0": "agentrl.envs.openspiel.env:kuhn_poker",
    "LeducPoker-v0": "agentrl.envs.openspiel.env:leduc_poker",
    "Hanabi-v0": "agentrl.envs.openspiel.env:hanabi",
    "TinyHanabi-v0": "agentrl.envs.openspiel.env:tiny_hanabi",
    "Goofspiel-v0": "agentrl.envs.openspiel.env:goofspiel",
    "Agent-v0": "agentrl.envs.agent:AgentTasksEnv",
}

_plugins_loaded = False


def register(name: str, entry_point: str | Any, **kwargs: Any) -> str:
    """Register ``agentrl/<name>`` with Gymnasium (idempotent); returns the full id."""
    env_id = name if "/" in name else f"{NAMESPACE}/{name}"
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=entry_point, **kwargs)
    return env_id


def register_builtins() -> None:
    for name, entry_point in BUILTIN.items():
        register(name, entry_point)


def load_plugins(force: bool = False) -> list[str]:
    """Call every ``agentrl.envs`` entry point once (again with ``force``); returns the names loaded.

    A plug-in that fails to load is reported with a warning naming it; the others still load.
    """
    global _plugins_loaded
    loaded: list[str] = []
    if _plugins_loaded and not force:
        return loaded
    _plugins_loaded = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()()
            loaded.append(ep.name)
        except Exception as exc:  # a broken plug-in must not break every other env
            warnings.warn(
                f"agentrl env plug-in {ep.name!r} ({ep.value}) failed to load: {exc}", stacklevel=2
            )
    return loaded


def resolve_id(name: str) -> str:
    """``"Sokoban-v0"`` or ``"agentrl/Sokoban-v0"`` -> the registered Gymnasium id."""
    load_plugins()
    candidates = [name] if "/" in name else [f"{NAMESPACE}/{name}", name]
    for env_id in candidates:
        if env_id in gym.registry:
            return env_id
    known = list_envs()
    short = name.rsplit("/", 1)[-1]
    close = difflib.get_close_matches(short, [k.split("/", 1)[1] for k in known], n=2)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise KeyError(
        f"unknown environment {name!r}{hint} (registered agentrl envs: {', '.join(known)})"
    )


class EnvKwargsError(TypeError):
    """Keyword arguments the env does not take (the message names them and the valid ones;
    ``names`` lists them)."""

    def __init__(self, message: str, names: list[str]):
        super().__init__(message)
        self.names = names


def options(name: str) -> list[str] | None:
    """The keyword arguments env ``name`` accepts (``None``: any, its creator takes ``**kwargs``)."""
    spec = gym.registry[resolve_id(name)]
    creator = spec.entry_point
    if isinstance(creator, str):
        creator = load_env_creator(creator)
    try:
        params = inspect.signature(creator).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: nothing to read
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in params if p.kind in keyword and p.name != "self"]


def check_kwargs(name: str, kwargs: dict[str, Any]) -> None:
    """Raise :class:`EnvKwargsError` naming each kwarg env ``name`` does not take, with the
    closest valid one and the full list."""
    valid = options(name)
    if valid is None:
        return
    bad = [k for k in kwargs if k not in valid and k != "render_mode"]
    if not bad:
        return
    hints = []
    for k in bad:
        close = (
            difflib.get_close_matches(k, valid, n=1, cutoff=0.5)
            or [v for v in valid if v.startswith(k)][:1]
        )
        hints.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise EnvKwargsError(
        f"{name} has no option {', '.join(hints)}; its options: {', '.join(valid) or 'none'}", bad
    )


def make(name: str, **kwargs: Any) -> gym.Env:
    """Create an environment by id, returning the env itself (not Gymnasium's wrappers).

    Env-specific options are keyword arguments, e.g. ``make("Sokoban-v0", dim_room=5)``; an
    unknown one raises :class:`EnvKwargsError` naming it. Use
    ``gymnasium.make("agentrl/Sokoban-v0")`` for the wrapped (checked, order-enforced) env.
    """
    env_id = resolve_id(name)
    check_kwargs(name, kwargs)
    return gym.make(env_id, disable_env_checker=True, **kwargs).unwrapped


def list_envs() -> list[str]:
    """Ids of every registered ``agentrl/`` env, plug-ins included."""
    load_plugins()
    return sorted(k for k in gym.registry if k.startswith(f"{NAMESPACE}/"))


def parse_kwargs(pairs: Sequence[str]) -> dict[str, Any]:
    """Command-line env kwargs: ``["dim_room=5", "open_room=true"]`` -> ``{"dim_room": 5,
    "open_room": True}`` (YAML values, read with ``yaml.safe_load``: data only). Raises
    ``ValueError`` naming a pair that is not ``KEY=VALUE``."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"--kwargs takes KEY=VALUE pairs, got {pair!r}")
        out[key] = yaml.safe_load(value)
    return out
