"""The env pool's contract, shared by every backend: env recipes, what a worker runs, and
:class:`BasePool` (episode bookkeeping: cut episodes, last observations, retries)."""

from __future__ import annotations

import contextlib
import pickle
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import gymnasium as gym

from agentrl import envs

__all__ = [
    "BasePool",
    "EnvFn",
    "EnvSpec",
    "Reply",
    "StepResult",
    "build_envs",
    "encode_replies",
    "run_op",
]


@dataclass(frozen=True)
class EnvSpec:
    """A picklable recipe for an env: ``envs.make(name, **kwargs)``."""

    name: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self) -> gym.Env:
        return envs.make(self.name, **self.kwargs)


@dataclass(frozen=True)
class ResetSpec:
    """How to start one episode: ``reset(seed=seed, options=options)``; ``group`` ties the N
    rollouts of one task together."""

    group: int
    seed: int | None = None
    options: dict[str, Any] | None = None


class StepResult(NamedTuple):
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


EnvFn = Callable[[], gym.Env]
#: What a worker answers per env: ``(env index, ok, result or error text)``.
Reply = tuple[int, bool, Any]


# -- what runs inside a worker (process or Ray actor) ------------------------------------------
def run_op(env: gym.Env, op: str, args: tuple) -> tuple[bool, Any]:
    """Apply one operation to one env; returns (ok, result or error text)."""
    try:
        if op == "reset":
            seed, options = args
            return True, env.reset(seed=seed, options=options)
        if op == "step":
            obs, reward, terminated, truncated, info = env.step(args[0])
            return True, StepResult(obs, float(reward), bool(terminated), bool(truncated), info)
        name, call_args = args
        return True, getattr(env, name)(*call_args)
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"


def _unpicklable_part(op: str, value: Any) -> str:
    """Name the part of a result that pickle rejects (``info['key']``, ``observation``, ...)."""
    if op == "step" and isinstance(value, StepResult):
        parts = {f: getattr(value, f) for f in StepResult._fields if f != "info"}
        parts.update({f"info[{k!r}]": v for k, v in value.info.items()})
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

    Only the env whose result fails is affected: its reply turns into ``(i, False, why)`` naming
    the field and the pickling error, and the other envs' replies go through unchanged.
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
            safe.append((i, False, why))
    return pickle.dumps(safe, protocol=pickle.HIGHEST_PROTOCOL)


def build_envs(env_fns: dict[int, EnvFn]) -> tuple[dict[int, gym.Env] | None, str | None]:
    """Build a worker's envs; returns (envs, None) or (None, why) naming the env that failed."""
    envs: dict[int, gym.Env] = {}
    for i, fn in env_fns.items():
        try:
            envs[i] = fn()
        except Exception as exc:
            for env in envs.values():
                with contextlib.suppress(Exception):
                    env.close()
            return None, f"building env {i} failed: {type(exc).__name__}: {exc}"
    return envs, None


# -- the backend-independent contract -----------------------------------------------------------
class BasePool:
    """Episode bookkeeping shared by the backends: cut episodes, last observations, retries.

    A backend sets ``self.num_groups`` (worker processes or actors; 0 keeps envs in this process)
    and implements :meth:`_exchange`, which sends each group its items, waits under one deadline
    and replaces the groups that failed.
    """

    def __init__(self, env_fns: Sequence[EnvFn], num_groups: int, step_timeout: float | None):
        if step_timeout is not None and not step_timeout > 0:
            raise ValueError(f"step_timeout must be > 0 seconds or None, got {step_timeout}")
        self.env_fns = list(env_fns)
        self.num_envs = len(self.env_fns)
        self.num_groups = min(num_groups, self.num_envs)
        self.step_timeout = step_timeout
        self.restarts = 0
        # Last observation/info per env: what a cut episode reports.
        self._last: list[tuple[str, dict[str, Any]]] = [("", {}) for _ in range(self.num_envs)]
        self._broken: dict[int, str] = {}  # env index -> why its episode was cut (until reset)

    # -- public API ----------------------------------------------------------------------------
    def reset(
        self,
        indices: Sequence[int] | None = None,
        seeds: Sequence[int | None] | None = None,
        options: Sequence[dict[str, Any] | None] | None = None,
    ) -> list[tuple[str, dict[str, Any]]]:
        """Reset the given envs (all by default); returns ``(observation, info)`` per env.

        An env whose reset fails raises ``RuntimeError`` naming the env and the cause: a task that
        cannot start is a configuration error, not an episode outcome.
        """
        idx = self._indices(indices)
        seeds = list(seeds) if seeds is not None else [None] * len(idx)
        options = list(options) if options is not None else [None] * len(idx)
        if not len(seeds) == len(options) == len(idx):
            raise ValueError("indices, seeds and options must have the same length")
        out = self._dispatch("reset", idx, [(s, o) for s, o in zip(seeds, options)], retry=True)
        results = []
        for i, (ok, value) in zip(idx, out):
            if not ok:
                raise RuntimeError(f"reset of env {i} failed: {value}")
            self._broken.pop(i, None)
            self._last[i] = (value[0], value[1])
            results.append((value[0], value[1]))
        return results

    def step(self, indices: Sequence[int], actions: Sequence[str]) -> list[StepResult]:
        """Step the given envs with one action each; returns one :class:`StepResult` per env."""
        idx = self._indices(indices)
        if len(actions) != len(idx):
            raise ValueError(f"{len(actions)} actions for {len(idx)} envs")
        results: list[StepResult] = []
        live = [k for k, i in enumerate(idx) if i not in self._broken]
        out = dict(
            zip(live, self._dispatch("step", [idx[k] for k in live], [(actions[k],) for k in live]))
        )
        for k, i in enumerate(idx):
            ok, value = out.get(k, (False, self._broken.get(i, "")))
            if ok:
                self._last[i] = (value.observation, value.info)
                results.append(value)
            else:
                self._broken[i] = value
                results.append(self._cut(i, value))
        return results

    def call(self, indices: Sequence[int] | None, method: str, *args: Any) -> list[Any]:
        """Call ``env.<method>(*args)`` on the given envs (e.g. ``"expert_action"``).

        Raises ``RuntimeError`` naming the env when a call fails.
        """
        idx = self._indices(indices)
        out = self._dispatch("call", idx, [(method, args)] * len(idx), retry=True)
        values = []
        for i, (ok, value) in zip(idx, out):
            if not ok:
                raise RuntimeError(f"env {i}: {method}() failed: {value}")
            values.append(value)
        return values

    def close(self) -> None:
        raise NotImplementedError

    def __len__(self) -> int:
        return self.num_envs

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------
    def _indices(self, indices: Sequence[int] | None) -> list[int]:
        idx = list(range(self.num_envs)) if indices is None else [int(i) for i in indices]
        for i in idx:
            if not 0 <= i < self.num_envs:
                raise IndexError(f"env index {i} out of range for a pool of {self.num_envs}")
        if len(set(idx)) != len(idx):
            raise ValueError("env indices must be distinct within one call")
        return idx

    def _group_envs(self, g: int) -> dict[int, EnvFn]:
        """The envs of group ``g``: env ``i`` lives in group ``i % num_groups``."""
        return {i: self.env_fns[i] for i in range(g, self.num_envs, self.num_groups)}

    def _cut(self, i: int, why: str) -> StepResult:
        obs, info = self._last[i]
        info = dict(info, error=why.strip().splitlines()[0] if why else "episode cut")
        info["error_detail"] = why
        return StepResult(obs, 0.0, False, True, info)

    def _dispatch(
        self, op: str, idx: list[int], args: list[tuple], retry: bool = False
    ) -> list[tuple[bool, Any]]:
        """Run ``op`` on the envs ``idx``; resets and calls are retried once after a crash."""
        if self.num_groups == 0:
            return [run_op(self._local[i], op, a) for i, a in zip(idx, args)]
        answers, crashed = self._round(op, list(zip(idx, args)))
        if retry and crashed:
            again, _ = self._round(op, [(i, a) for i, a in zip(idx, args) if i in crashed])
            answers.update(again)
        return [answers[i] for i in idx]

    def _round(
        self, op: str, items: list[tuple[int, tuple]]
    ) -> tuple[dict[int, tuple[bool, Any]], set[int]]:
        """One message per group, one deadline; failed groups are replaced and their envs cut."""
        by_group: dict[int, list[tuple[int, tuple]]] = {}
        for i, a in items:
            by_group.setdefault(i % self.num_groups, []).append((i, a))
        replies, failed = self._exchange(op, by_group)
        answers = {i: (ok, value) for i, ok, value in replies}
        crashed: set[int] = set()
        for g, why in failed.items():
            self.restarts += 1
            for i in self._group_envs(g):
                self._broken[i] = why
            for i, _ in by_group[g]:
                answers[i] = (False, why)
                crashed.add(i)
        return answers, crashed

    def _exchange(
        self, op: str, by_group: dict[int, list[tuple[int, tuple]]]
    ) -> tuple[list[Reply], dict[int, str]]:
        """Send, wait (one deadline), restart failures: (replies, {group: why it failed})."""
        raise NotImplementedError

    def _deadline(self, by_group: dict[int, list]) -> tuple[float | None, str]:
        """The call's one deadline: ``step_timeout`` per env of the busiest worker in the call.

        A worker runs its envs of a call one after another, so a worker holding k of them gets
        k x ``step_timeout``; every worker shares that deadline, so hung workers never add up.
        """
        if self.step_timeout is None:
            return None, ""
        most = max((len(items) for items in by_group.values()), default=1)
        limit = self.step_timeout * most
        return (
            time.monotonic() + limit,
            f"timed out after {limit:g} s (step_timeout {self.step_timeout:g} s x {most} envs)"
            if most > 1
            else f"timed out after {limit:g} s",
        )
