"""Env pool backend: worker processes on this machine (:class:`EnvPool`).

With ``num_workers=0`` the envs live in this process; otherwise env ``i`` lives in worker
``i % num_workers``. Every call sends one message per worker and gets one back; while it runs an
env a worker keeps that env's index in shared memory, so when it dies or misses its deadline the
pool knows which env it was running (the contract is :class:`agentrl.pool.base.BasePool`'s).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import pickle
import signal
import time
from collections.abc import Sequence
from multiprocessing.connection import wait
from typing import Any

from .base import BasePool, EnvFn, WorkerFault, memory_fault
from .worker import (
    EXIT_OVER_MEMORY,
    MemoryGuard,
    Reply,
    answer,
    build_envs,
    encode_replies,
    env_traits,
)

__all__ = ["EnvPool"]

_IDLE = -1  # what a worker's progress value holds between env operations


def _worker(conn, env_fns: dict[int, EnvFn], memory_mb: float | None, progress) -> None:
    guard = MemoryGuard(memory_mb)
    envs, why = build_envs(env_fns, guard)
    traits = env_traits(envs) if envs is not None else {}
    conn.send_bytes(pickle.dumps(("ready", why, traits)))
    if envs is None:
        conn.close()
        return
    try:
        while True:
            msg = conn.recv()
            if msg is None:
                break
            op, items = msg
            replies = []
            for i, a in items:
                progress.value = i  # read by the pool if this worker dies or hangs now
                replies.append(answer(envs, guard, op, i, a))
            progress.value = _IDLE
            conn.send_bytes(encode_replies(op, replies))
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        for env in envs.values():
            with contextlib.suppress(Exception):
                env.close()


# -- worker processes ---------------------------------------------------------------------------
class _Worker:
    def __init__(self, ctx, env_fns: dict[int, EnvFn], memory_mb: float | None):
        self.env_fns = env_fns
        self.ready = False
        self.progress = ctx.RawValue("l", _IDLE)  # the env it is running, in shared memory
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=_worker, args=(child, env_fns, memory_mb, self.progress), daemon=True
        )
        self.process.start()
        child.close()

    def running(self) -> int | None:
        """The env this worker is running now (``None`` between env operations)."""
        i = int(self.progress.value)
        return None if i == _IDLE else i

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class EnvPool(BasePool):
    """Many envs, stepped together in worker processes on this machine.

    Args:
        env_fns: one picklable zero-argument callable per env (e.g. :class:`EnvSpec`).
        num_workers: worker processes; 0 keeps every env in this process.
        mp_context: multiprocessing start method (``"forkserver"``, ``"spawn"`` or ``"fork"``).
        step_timeout: seconds per env call; a call's deadline is this times the most envs any one
            worker holds in the call, shared by all workers; late workers are killed and
            restarted (``None``: wait forever). Not enforced with 0 workers.
        worker_memory_mb: resident memory each worker may use (its envs together); a worker
            over it is restarted and the env it was running loses its episode (``None``: no
            limit). Not enforced with 0 workers.
    """

    def __init__(
        self,
        env_fns: Sequence[EnvFn],
        num_workers: int = 0,
        mp_context: str = "forkserver",
        step_timeout: float | None = None,
        worker_memory_mb: float | None = None,
    ):
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        super().__init__(env_fns, num_workers, step_timeout, worker_memory_mb)
        self.num_workers = self.num_groups
        self._closed = False
        if self.num_workers == 0:
            self._local = [fn() for fn in self.env_fns]
            self._replayable = list(env_traits(dict(enumerate(self._local))).values())
            self._workers: list[_Worker] = []
        else:
            self._ctx = mp.get_context(mp_context)
            self._workers = [self._start(w) for w in range(self.num_workers)]

    def close(self, timeout: float = 5.0) -> None:
        """End the workers: each gets ``timeout`` seconds to finish its call and exit, then is
        killed. Safe while another thread is in a call (an env server stopping): that call
        then fails with ``RuntimeError`` instead of restarting workers."""
        self._closed = True
        workers, self._workers = self._workers, []
        for w in workers:
            with contextlib.suppress(BrokenPipeError, OSError):
                w.conn.send(None)
        deadline = time.monotonic() + timeout
        for w in workers:
            w.process.join(timeout=max(0.0, deadline - time.monotonic()))
            w.kill()
        for env in getattr(self, "_local", []):
            env.close()
        self._local = []

    def worker_pids(self) -> list[int]:
        return [w.process.pid for w in self._workers]

    # -- internals -----------------------------------------------------------------------------
    def _start(self, w: int) -> _Worker:
        return _Worker(self._ctx, self._group_envs(w), self.worker_memory_mb)

    def _await_ready(self, ws: list[int]) -> None:
        """Wait (untimed) until workers ``ws`` have built their envs; raise if one cannot."""
        for w in ws:
            worker = self._workers[w]
            if worker.ready:
                continue
            try:
                _, why, traits = pickle.loads(worker.conn.recv_bytes())
            except (EOFError, OSError):
                why, traits = f"{self._death(w)[1]} while building its envs", {}
            if why is not None:
                raise RuntimeError(f"env worker {w}: {why}")
            for i, replayable in traits.items():
                self._replayable[i] = replayable
            worker.ready = True

    def _exchange(
        self,
        op: str,
        by_group: dict[int, list[tuple[int, tuple]]],
        budget: tuple[float | None, str],
    ) -> tuple[list[Reply], dict[int, WorkerFault]]:
        if self._closed:
            raise RuntimeError("the env pool is closed")
        workers = self._workers  # close() may empty the list meanwhile
        self._await_ready(list(by_group))
        replies: list[Reply] = []
        failed: dict[int, WorkerFault] = {}
        pending: dict[Any, int] = {}
        for w, items in by_group.items():
            try:
                workers[w].conn.send((op, items))
                pending[workers[w].conn] = w
            except (BrokenPipeError, OSError):
                failed[w] = WorkerFault(*self._death(w, workers), None)
        seconds, late = budget
        deadline = None if seconds is None else time.monotonic() + seconds
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            sentinels = {workers[w].process.sentinel: w for w in pending.values()}
            ready = wait([*pending, *sentinels], timeout=left)
            if not ready:  # the deadline passed: every worker still pending is late
                for w in pending.values():
                    worker = workers[w]
                    why = f"worker {w} (pid {worker.process.pid}) {late}"
                    failed[w] = WorkerFault("timeout", why, worker.running())
                break
            for obj in ready:
                w = pending.get(obj, sentinels.get(obj))
                if w is None or workers[w].conn not in pending:
                    continue
                worker = workers[w]
                try:
                    if obj is worker.conn or worker.conn.poll():
                        answers = pickle.loads(worker.conn.recv_bytes())
                        replies.extend(answers)
                        fault = memory_fault(answers)
                        if fault is not None:
                            failed[w] = fault
                    else:  # the process ended without answering
                        failed[w] = WorkerFault(*self._death(w, workers), worker.running())
                except (EOFError, OSError):
                    failed[w] = WorkerFault(*self._death(w, workers), worker.running())
                del pending[worker.conn]
        if self._closed:  # closed during the call: its workers were killed, not failed
            raise RuntimeError("the env pool was closed during the call")
        for w in failed:
            workers[w].kill()
            workers[w] = self._start(w)
        return replies, failed

    def _death(self, w: int, workers: list[_Worker] | None = None) -> tuple[str, str]:
        """``(kind, why)`` worker ``w`` is gone, with its exit code or the signal that killed it."""
        process = (self._workers if workers is None else workers)[w].process
        process.join(timeout=2)
        code = process.exitcode
        if code == EXIT_OVER_MEMORY:
            return "memory", (
                f"worker {w} (pid {process.pid}) went over env.worker_memory_mb="
                f"{self.worker_memory_mb:g} during the call and was ended by its watchdog"
            )
        if code is not None and code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        else:
            how = f"died with exit code {code}"
        return "crash", f"worker {w} (pid {process.pid}) {how}"
