"""Env pool backend: worker processes on this machine (:class:`EnvPool`).

With ``num_workers=0`` the envs live in this process; otherwise env ``i`` lives in worker
``i % num_workers`` and every call sends one message per worker, so the workers step their envs
concurrently. A worker that dies or misses its deadline is killed and restarted with fresh envs
(the contract is :class:`agentrl.pool.base.BasePool`'s).
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

from .base import BasePool, EnvFn, Reply, build_envs, encode_replies, run_op

__all__ = ["EnvPool"]


def _worker(conn, env_fns: dict[int, EnvFn]) -> None:
    envs, why = build_envs(env_fns)
    conn.send_bytes(pickle.dumps(("ready", why)))
    if envs is None:
        conn.close()
        return
    try:
        while True:
            msg = conn.recv()
            if msg is None:
                break
            op, items = msg
            conn.send_bytes(encode_replies(op, [(i, *run_op(envs[i], op, a)) for i, a in items]))
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        for env in envs.values():
            with contextlib.suppress(Exception):
                env.close()


# -- worker processes ---------------------------------------------------------------------------
class _Worker:
    def __init__(self, ctx, env_fns: dict[int, EnvFn]):
        self.env_fns = env_fns
        self.ready = False
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker, args=(child, env_fns), daemon=True)
        self.process.start()
        child.close()

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
        super().__init__(env_fns, num_workers, step_timeout)
        self.num_workers = self.num_groups
        if self.num_workers == 0:
            self._local = [fn() for fn in self.env_fns]
            self._workers: list[_Worker] = []
        else:
            self._ctx = mp.get_context(mp_context)
            self._workers = [
                _Worker(self._ctx, self._group_envs(w)) for w in range(self.num_workers)
            ]

    def close(self) -> None:
        for w in self._workers:
            with contextlib.suppress(BrokenPipeError, OSError):
                w.conn.send(None)
        for w in self._workers:
            w.process.join(timeout=5)
            w.kill()
        self._workers = []
        for env in getattr(self, "_local", []):
            env.close()
        self._local = []

    def worker_pids(self) -> list[int]:
        return [w.process.pid for w in self._workers]

    # -- internals -----------------------------------------------------------------------------
    def _await_ready(self, ws: list[int]) -> None:
        """Wait (untimed) until workers ``ws`` have built their envs; raise if one cannot."""
        for w in ws:
            worker = self._workers[w]
            if worker.ready:
                continue
            try:
                _, why = pickle.loads(worker.conn.recv_bytes())
            except (EOFError, OSError):
                why = f"{self._death(w)} while building its envs"
            if why is not None:
                raise RuntimeError(f"env worker {w}: {why}")
            worker.ready = True

    def _exchange(
        self, op: str, by_group: dict[int, list[tuple[int, tuple]]]
    ) -> tuple[list[Reply], dict[int, str]]:
        self._await_ready(list(by_group))
        replies: list[Reply] = []
        failed: dict[int, str] = {}
        pending: dict[Any, int] = {}
        for w, items in by_group.items():
            try:
                self._workers[w].conn.send((op, items))
                pending[self._workers[w].conn] = w
            except (BrokenPipeError, OSError):
                failed[w] = self._death(w)
        deadline, late = self._deadline(by_group)
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            sentinels = {self._workers[w].process.sentinel: w for w in pending.values()}
            ready = wait([*pending, *sentinels], timeout=left)
            if not ready:  # the deadline passed: every worker still pending is late
                for w in pending.values():
                    failed[w] = f"worker {w} (pid {self._workers[w].process.pid}) {late}"
                break
            for obj in ready:
                w = pending.get(obj, sentinels.get(obj))
                if w is None or self._workers[w].conn not in pending:
                    continue
                conn = self._workers[w].conn
                try:
                    if obj is conn or conn.poll():
                        replies.extend(pickle.loads(conn.recv_bytes()))
                    else:  # the process ended without answering
                        failed[w] = self._death(w)
                except (EOFError, OSError):
                    failed[w] = self._death(w)
                del pending[conn]
        for w in failed:
            self._workers[w].kill()
            self._workers[w] = _Worker(self._ctx, self._group_envs(w))
        return replies, failed

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
