"""What runs inside a pool worker (a process or a Ray actor): building envs, applying one
operation to one env, replaying an episode, the memory guard, and packing replies.

A worker answers every item of a call with exactly one reply, in order: ``(env index, True,
result)``, ``(env index, False, Fault)``, or ``(env index, None, None)`` for an item it did not run
(its memory guard tripped earlier in the call; the pool restarts it and runs the item elsewhere).
Results are sent raw: the pool checks them (:mod:`agentrl.pool.checks`) where they arrive.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import resource
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym

from .checks import Fault, StepResult, digest

__all__ = [
    "EXIT_OVER_MEMORY",
    "MemoryGuard",
    "Reply",
    "answer",
    "build_envs",
    "encode_replies",
    "env_traits",
    "rss_mb",
    "run_op",
]

EnvFn = Callable[[], gym.Env]
#: What a worker answers per env: ``(env index, ok, result or Fault)``; ``ok`` None: not run.
Reply = tuple[int, bool | None, Any]
#: Exit code of a worker whose memory watchdog ended it in the middle of an env call.
EXIT_OVER_MEMORY = 86
#: Seconds between the watchdog's looks at the worker's resident memory during a call.
_WATCH_S = 0.1


def rss_mb() -> float:
    """This process's resident memory in MiB (``/proc`` on Linux; elsewhere its peak)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 1024


class MemoryGuard:
    """Enforces ``worker_memory_mb`` on this worker's resident memory (``None``: no limit).

    After every env call the worker compares its memory with the limit: over it, that call's env
    is blamed (``Fault("memory", ...)``) and the worker answers the rest of the call as not run,
    so the pool restarts it (which frees the memory). During a call a watchdog thread looks every
    0.1 s, so a single call that stays over the limit for two looks ends the process (exit code
    :data:`EXIT_OVER_MEMORY`) before it takes the machine down.
    """

    def __init__(self, limit_mb: float | None):
        self.limit_mb = limit_mb
        self.tripped = False
        self._busy = threading.Event()
        if limit_mb is not None:
            threading.Thread(target=self._watch, name="memory-watchdog", daemon=True).start()

    def over(self) -> str | None:
        """Why the worker is over its limit now (and remember it), or ``None``."""
        if self.limit_mb is None:
            return None
        rss = rss_mb()
        if rss <= self.limit_mb:
            return None
        self.tripped = True
        return (
            f"its worker's resident memory reached {rss:.0f} MiB, over "
            f"env.worker_memory_mb={self.limit_mb:g}"
        )

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        if self.limit_mb is None:
            yield
            return
        self._busy.set()
        try:
            yield
        finally:
            self._busy.clear()

    def _watch(self) -> None:
        over = 0  # consecutive looks over the limit during a call
        while True:
            self._busy.wait()
            time.sleep(_WATCH_S)
            over = over + 1 if self._busy.is_set() and rss_mb() > self.limit_mb else 0
            # twice in a row: a call that merely ended over the limit is left to the check after
            # it (which blames its env without killing the worker mid-call)
            if over >= 2:
                print(
                    f"agentrl env worker {os.getpid()}: resident memory {rss_mb():.0f} MiB over "
                    f"env.worker_memory_mb={self.limit_mb:g} during an env call; exiting",
                    file=sys.stderr,
                    flush=True,
                )
                os._exit(EXIT_OVER_MEMORY)


def run_op(env: gym.Env, op: str, args: tuple) -> tuple[bool, Any]:
    """Apply one operation to one env; returns (ok, raw result or Fault)."""
    try:
        if op == "reset":
            seed, options = args
            return True, env.reset(seed=seed, options=options)
        if op == "step":
            out = env.step(args[0])
            is_five = isinstance(out, tuple) and len(out) == 5
            return True, StepResult(*out) if is_five else out
        if op == "replay":
            return True, _replay(env, *args)
        name, call_args = args
        return True, getattr(env, name)(*call_args)
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"
        return False, Fault("exception", text)


def _replay(
    env: gym.Env, seed: int | None, options: dict | None, actions: list[str]
) -> tuple[list[str], list[float]]:
    """Reset and step ``env`` as an episode went: the digest of every observation, the rewards."""
    obs, _ = env.reset(seed=seed, options=options)
    digests, rewards = [digest(obs)], []
    for action in actions:
        obs, reward, *_ = env.step(action)
        digests.append(digest(obs))
        rewards.append(float(reward))
    return digests, rewards


def answer(envs: dict[int, gym.Env], guard: MemoryGuard, op: str, i: int, args: tuple) -> Reply:
    """One item of a call: run it unless the memory guard has tripped, then check memory."""
    if guard.tripped:
        return (i, None, None)
    with guard.busy():
        ok, value = run_op(envs[i], op, args)
    why = guard.over()
    if why is not None:
        return (i, False, Fault("memory", why))
    return (i, ok, value)


def env_traits(envs: dict[int, gym.Env]) -> dict[int, bool]:
    """Whether each env may be replayed: ``env.metadata["replayable"]`` (default True)."""
    return {i: bool((getattr(env, "metadata", None) or {}).get("replayable", True))
            for i, env in envs.items()}  # fmt: skip


def _unpicklable_part(op: str, value: Any) -> str:
    """Name the part of a result that pickle rejects (``info['key']``, ``observation``, ...)."""
    if op == "step" and isinstance(value, StepResult):
        parts = {f: getattr(value, f) for f in StepResult._fields if f != "info"}
        info = value.info if isinstance(value.info, dict) else {}
        parts.update({f"info[{k!r}]": v for k, v in info.items()})
    elif op == "reset" and isinstance(value, tuple) and len(value) == 2:
        parts = {"observation": value[0]}
        info = value[1] if isinstance(value[1], dict) else {}
        parts.update({f"info[{k!r}]": v for k, v in info.items()})
    else:
        return "the result"
    for name, part in parts.items():
        try:
            pickle.dumps(part)
        except Exception:
            return name
    return "the result"


def encode_replies(op: str, replies: list[Reply]) -> bytes:
    """Pickle a worker's replies; a result that cannot be pickled becomes an error for its env.

    Only the env whose result fails is affected: its reply turns into ``(i, False, Fault)``
    naming the field and the pickling error, and the other envs' replies go through unchanged.
    """
    try:
        return pickle.dumps(replies, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        pass
    safe: list[Reply] = []
    for i, ok, value in replies:
        try:
            pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            safe.append((i, ok, value))
        except Exception as exc:
            part = _unpicklable_part(op, value) if ok else "the error text"
            why = (
                f"{op} result of env {i} cannot be sent from its worker: {part} cannot be "
                f"pickled ({type(exc).__name__}: {exc})"
            )
            safe.append((i, False, Fault("unpicklable", why)))
    return pickle.dumps(safe, protocol=pickle.HIGHEST_PROTOCOL)


def build_envs(
    env_fns: dict[int, EnvFn], guard: MemoryGuard | None = None
) -> tuple[dict[int, gym.Env] | None, str | None]:
    """Build a worker's envs; returns (envs, None) or (None, why) naming the env that failed,
    or saying that the built envs already use more memory than the worker may."""
    envs: dict[int, gym.Env] = {}
    for i, fn in env_fns.items():
        try:
            envs[i] = fn()
        except Exception as exc:
            _close(envs)
            return None, f"building env {i} failed: {type(exc).__name__}: {exc}"
    why = guard.over() if guard is not None else None
    if why is not None:
        _close(envs)
        return None, f"after building its {len(envs)} envs, {why}: raise the limit"
    return envs, None


def _close(envs: dict[int, gym.Env]) -> None:
    for env in envs.values():
        with contextlib.suppress(Exception):
            env.close()
