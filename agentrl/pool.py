"""A pool of text environments stepped in parallel worker processes.

``EnvPool`` holds N environments. With ``num_workers=0`` they live in this process; otherwise env
``i`` lives in worker ``i % num_workers`` and every call sends one message per worker, so the
workers step their envs concurrently. There is no automatic reset: the caller resets each env with
its own seed and options, which is how a group of rollouts starts from one task.

Failures never take the pool down:

- an env that raises ends its episode as truncated, with ``info["error"]`` naming the exception;
- a worker that dies (or exceeds ``step_timeout``) is restarted with fresh envs; every episode it
  held ends as truncated with ``info["error"]`` saying what happened, and must be reset.

The pool imports no torch; it is shared by training, evaluation and benchmarks.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import signal
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import gymnasium as gym

__all__ = ["EnvPool", "EnvSpec", "StepResult"]


@dataclass(frozen=True)
class EnvSpec:
    """A picklable recipe for an env: ``envs.make(name, **kwargs)``."""

    name: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self) -> gym.Env:
        from agentrl import envs

        return envs.make(self.name, **self.kwargs)


class StepResult(NamedTuple):
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


EnvFn = Callable[[], gym.Env]


def _run(env: gym.Env, op: str, args: tuple) -> tuple[bool, Any]:
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


def _worker(conn, env_fns: dict[int, EnvFn]) -> None:
    envs = {i: fn() for i, fn in env_fns.items()}
    try:
        while True:
            msg = conn.recv()
            if msg is None:
                break
            op, items = msg
            conn.send([(i, *_run(envs[i], op, args)) for i, args in items])
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        for env in envs.values():
            with contextlib.suppress(Exception):
                env.close()


class _Worker:
    def __init__(self, ctx, env_fns: dict[int, EnvFn]):
        self.env_fns = env_fns
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker, args=(child, env_fns), daemon=True)
        self.process.start()
        child.close()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class EnvPool:
    """Many envs, stepped together.

    Args:
        env_fns: one picklable zero-argument callable per env (e.g. :class:`EnvSpec`).
        num_workers: worker processes; 0 keeps every env in this process.
        mp_context: multiprocessing start method (``"forkserver"``, ``"spawn"`` or ``"fork"``).
        step_timeout: seconds a worker may take to answer one call before it is killed and
            restarted (``None``: wait forever).
    """

    def __init__(
        self,
        env_fns: Sequence[EnvFn],
        num_workers: int = 0,
        mp_context: str = "forkserver",
        step_timeout: float | None = None,
    ):
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        self.env_fns = list(env_fns)
        self.num_envs = len(self.env_fns)
        self.num_workers = min(num_workers, self.num_envs)
        self.step_timeout = step_timeout
        self.restarts = 0
        # Last observation/info per env: what a cut episode reports.
        self._last: list[tuple[str, dict[str, Any]]] = [("", {}) for _ in range(self.num_envs)]
        self._broken: dict[int, str] = {}  # env index -> why its episode was cut (until reset)
        if self.num_workers == 0:
            self._envs = [fn() for fn in self.env_fns]
            self._workers: list[_Worker] = []
        else:
            self._ctx = mp.get_context(mp_context)
            self._workers = [self._start(w) for w in range(self.num_workers)]

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
        for w in self._workers:
            with contextlib.suppress(BrokenPipeError, OSError):
                w.conn.send(None)
            w.process.join(timeout=5)
            w.kill()
        self._workers = []
        for env in getattr(self, "_envs", []):
            env.close()

    def worker_pids(self) -> list[int]:
        return [w.process.pid for w in self._workers]

    def __len__(self) -> int:
        return self.num_envs

    def __enter__(self) -> EnvPool:
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

    def _start(self, w: int) -> _Worker:
        fns = {i: self.env_fns[i] for i in range(w, self.num_envs, self.num_workers)}
        return _Worker(self._ctx, fns)

    def _cut(self, i: int, why: str) -> StepResult:
        obs, info = self._last[i]
        info = dict(info, error=why.strip().splitlines()[0] if why else "episode cut")
        info["error_detail"] = why
        return StepResult(obs, 0.0, False, True, info)

    def _dispatch(
        self, op: str, idx: list[int], args: list[tuple], retry: bool = False
    ) -> list[tuple[bool, Any]]:
        if self.num_workers == 0:
            return [_run(self._envs[i], op, a) for i, a in zip(idx, args)]
        by_worker: dict[int, list[tuple[int, tuple]]] = {}
        for i, a in zip(idx, args):
            by_worker.setdefault(i % self.num_workers, []).append((i, a))
        answers: dict[int, tuple[bool, Any]] = {}
        crashed: set[int] = set()
        sent = []
        for w, items in by_worker.items():
            try:
                self._workers[w].conn.send((op, items))
                sent.append(w)
            except (BrokenPipeError, OSError):
                self._fail_worker(w, items, self._death(w), answers, crashed)
        for w in sent:
            items = by_worker[w]
            reply = self._receive(w)
            if isinstance(reply, str):
                self._fail_worker(w, items, reply, answers, crashed)
            else:
                answers.update({i: (ok, value) for i, ok, value in reply})
        if retry:  # resets and calls are retried once on a restarted worker
            for i, a in zip(idx, args):
                if i not in crashed:
                    continue
                w = i % self.num_workers
                try:
                    self._workers[w].conn.send((op, [(i, a)]))
                    reply = self._receive(w)
                except (BrokenPipeError, OSError):
                    reply = self._death(w)
                if isinstance(reply, str):
                    self._fail_worker(w, [(i, a)], reply, answers, crashed)
                else:
                    answers[i] = (reply[0][1], reply[0][2])
        return [answers[i] for i in idx]

    def _receive(self, w: int) -> list | str:
        """One worker's reply, or a string saying why none came."""
        worker = self._workers[w]
        waited = 0.0
        while True:
            try:
                if worker.conn.poll(0.1):
                    return worker.conn.recv()
            except (EOFError, OSError):
                return self._death(w)
            if not worker.process.is_alive():
                return self._death(w)
            waited += 0.1
            if self.step_timeout is not None and waited >= self.step_timeout:
                return (
                    f"worker {w} (pid {worker.process.pid}) timed out after {self.step_timeout} s"
                )

    def _death(self, w: int) -> str:
        """Why worker ``w`` is gone, with its exit code or the signal that killed it."""
        process = self._workers[w].process
        process.join(timeout=2)
        code = process.exitcode
        if code is not None and code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        else:
            how = f"died with exit code {code}"
        return f"worker {w} (pid {process.pid}) {how}"

    def _fail_worker(self, w: int, items: list, why: str, answers: dict, crashed: set) -> None:
        """Restart worker ``w``; every episode it held is cut."""
        self._workers[w].kill()
        self._workers[w] = self._start(w)
        self.restarts += 1
        for i in self._workers[w].env_fns:
            self._broken[i] = why
        for i, _ in items:
            answers[i] = (False, why)
            crashed.add(i)
