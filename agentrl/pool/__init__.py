"""A pool of text environments stepped in parallel: worker processes here, or Ray actors.

``EnvPool`` holds N environments. With ``num_workers=0`` they live in this process; otherwise env
``i`` lives in worker ``i % num_workers`` and every call sends one message per worker, so the
workers step their envs concurrently. ``agentrl.pool.ray.RayEnvPool`` keeps the same contract with
the envs in Ray actors, anywhere on a Ray cluster; :func:`make_pool` picks the backend. There is
no automatic reset: the caller resets each env with its own seed and options, which is how a group
of rollouts starts from one task.

Failures never take the pool down, and a fault costs one episode:

- every step's output is checked where it enters the pool (:mod:`agentrl.pool.checks`): an env
  that raises, returns a wrong-typed observation, reward, flag or info, or a non-finite reward,
  ends its episode as truncated, with ``info["error"]`` naming the env and what was wrong and
  ``info["error_kind"]`` one of :data:`ERROR_KINDS`;
- an env whose result cannot be pickled (say, an ``info`` holding a lock) ends only its own
  episode, with ``info["error"]`` naming the field that could not be sent;
- a worker that dies, does not answer within ``step_timeout`` or goes over ``worker_memory_mb``
  is restarted with fresh envs; the env it was running loses its episode, and every other live
  episode it held is replayed on the new worker (its reset and actions; the observations must
  match) and goes on. An env with ``metadata["replayable"] = False`` is not replayed: its
  episode ends as truncated (``error_kind`` ``lost``).

``step_timeout`` is seconds per env call, and each call has one deadline: ``step_timeout`` times
the number of the call's envs on the busiest worker (a worker runs its envs one after another);
every worker answers by then, however many of them hang. Building the envs (at start and after a restart) is not timed; it happens before a
worker's first call.

The pool imports no torch; it is shared by training, evaluation and benchmarks.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from .base import BasePool, EnvFn, EnvSpec, ResetSpec
from .checks import ERROR_KINDS, StepResult
from .process import EnvPool
from .ray import RayEnvPool

__all__ = [
    "BACKENDS",
    "ERROR_KINDS",
    "BasePool",
    "EnvPool",
    "EnvSpec",
    "RayEnvPool",
    "ResetSpec",
    "StepResult",
    "make_pool",
]

#: Values of ``env.backend``.
BACKENDS = ("process", "ray", "http")


def make_pool(
    specs: Sequence[EnvFn],
    *,
    backend: str = "process",
    num_workers: int = 0,
    step_timeout: float | None = None,
    ray_address: str | None = None,
    envs_per_actor: int = 4,
    actor_num_cpus: float = 1.0,
    mp_context: str = "forkserver",
    http_urls: Sequence[str] = (),
    http_token: str | None = None,
    worker_memory_mb: float | None = None,
) -> BasePool:
    """Build the env pool of ``backend`` (``env.backend``): the trainer and evaluation call this.

    ``"process"``: :class:`EnvPool` with ``num_workers`` worker processes (``mp_context``).
    ``"ray"``: :class:`agentrl.pool.ray.RayEnvPool`, ``envs_per_actor`` envs per actor, each actor
    reserving ``actor_num_cpus`` CPUs, on the Ray at ``ray_address`` (``None``: ``RAY_ADDRESS``,
    else the Ray already initialised in this process, else a local Ray); ``num_workers`` is not
    used. ``"http"``: :class:`agentrl.pool.http.HTTPEnvPool`, env ``i`` a session on server
    ``http_urls[i % n]`` (``python -m agentrl.pool.serve``), with bearer token ``http_token``.
    ``worker_memory_mb`` (``env.worker_memory_mb``) caps each worker's or actor's resident
    memory (http: the servers set their own). All have the same methods and failure behaviour.
    """
    if backend == "process":
        return EnvPool(
            specs,
            num_workers=num_workers,
            mp_context=mp_context,
            step_timeout=step_timeout,
            worker_memory_mb=worker_memory_mb,
        )
    if backend == "ray":
        return RayEnvPool(
            specs,
            envs_per_actor=envs_per_actor,
            actor_num_cpus=actor_num_cpus,
            step_timeout=step_timeout,
            address=ray_address,
            worker_memory_mb=worker_memory_mb,
        )
    if backend == "http":
        from .http import HTTPEnvPool  # the serve extra (httpx)

        return HTTPEnvPool(specs, http_urls, step_timeout=step_timeout, token=http_token)
    raise ValueError(f"env.backend must be one of {', '.join(BACKENDS)}; got {backend!r}")


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    """``cfg.key`` of a dataclass, a DictConfig or a dict (``None`` sections allowed)."""
    if cfg is None:
        return default
    return cfg.get(key, default) if hasattr(cfg, "get") else getattr(cfg, key, default)


def backend_options(env: Any) -> dict[str, Any]:
    """The :func:`make_pool` options of an env config (``env.backend``, ``env.ray``,
    ``env.http``): the trainer's typed ``EnvConfig`` or the evaluation's env section alike. The
    http token is read from the variable ``env.http.token_env`` names."""
    ray, http = _get(env, "ray"), _get(env, "http")
    token_env = _get(http, "token_env")
    if token_env and not os.environ.get(token_env):
        raise ValueError(f"env.http.token_env={token_env}: the variable is empty or unset")
    return {
        "backend": str(_get(env, "backend", "process")),
        "ray_address": _get(ray, "address"),
        "envs_per_actor": int(_get(ray, "envs_per_actor", 4)),
        "actor_num_cpus": float(_get(ray, "num_cpus", 1.0)),
        "http_urls": [str(u) for u in (_get(http, "urls") or ())],
        "http_token": os.environ.get(token_env) if token_env else None,
        "worker_memory_mb": _get(env, "worker_memory_mb"),
    }
