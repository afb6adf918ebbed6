"""The env pool on Ray: the ``EnvPool`` contract with the envs in Ray actors, anywhere on a cluster.

Env ``i`` lives in actor ``i % num_actors`` (``num_actors = ceil(N / envs_per_actor)``); every call
sends one batched task per actor, so actors step their envs concurrently, and waits for all of them
under one deadline (``step_timeout`` per env of the busiest actor in the call). Failures are
handled as in the process pool (:class:`agentrl.pool.base.BasePool`): an env that raises or returns
a malformed result ends its episode; an actor that dies (``ray.kill``, a crash of its process, a
lost node), misses the deadline or goes over ``worker_memory_mb`` is killed and replaced, the env
it was running loses its episode, and its other live episodes are replayed on the replacement.
A late actor says (on a second thread) which env it hangs in; a dead one cannot, so after a death
the call's envs of that actor run again one at a time: a fault that recurs is pinned on its env
(one more restart), one that does not costs no episode.

Results travel as plain ``pickle`` bytes (not Ray's serializer), so the same objects can or cannot
cross in both backends, and an unpicklable ``info`` ends only its own episode.

Which Ray: the ``address`` argument (``env.ray.address``), else ``RAY_ADDRESS``, else the Ray this
process already initialised, else a local Ray started here (and shut down by :meth:`close`). A
local Ray started here gives its workers this process's ``sys.path``, so envs importable here (a
source checkout, a script's folder) import there too; on a cluster, install agentrl and the env
packages on every node.
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import sys
import time
import warnings
from collections.abc import Sequence
from typing import Any

from .base import BasePool, EnvFn, WorkerFault, memory_fault
from .worker import MemoryGuard, Reply, answer, build_envs, encode_replies, env_traits

__all__ = ["RayEnvPool"]

#: Seconds between warnings while actors wait to be placed or to build their envs.
_PLACEMENT_WARN_S = 60.0
#: Seconds a late actor gets to say which env it hangs in.
_ASK_S = 5.0


def _import_ray():
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "env.backend=ray needs Ray: pip install 'agentrl[ray]' (or pip install ray)"
        ) from exc
    return ray


class _EnvActor:
    """Holds a few envs in one Ray worker process; each call is one batched task. A second
    thread answers :meth:`running` while a call runs, so a late actor can say where it hangs."""

    def __init__(self, env_fns: dict[int, EnvFn], memory_mb: float | None = None):
        self.guard = MemoryGuard(memory_mb)
        self.envs, self.why = build_envs(env_fns, self.guard)
        self.current: int | None = None

    def ready(self) -> tuple[int, str | None, dict[int, bool]]:
        """This actor's pid, why its envs could not be built (None when they were), and whether
        each env may be replayed."""
        return os.getpid(), self.why, env_traits(self.envs or {})

    def running(self) -> int | None:
        """The env the actor is running now (``None`` between calls)."""
        return self.current

    def run(self, op: str, items: list[tuple[int, tuple]]) -> bytes:
        replies = []
        for i, a in items:
            self.current = i
            replies.append(answer(self.envs, self.guard, op, i, a))
        self.current = None
        return encode_replies(op, replies)

    def close(self) -> None:
        for env in (self.envs or {}).values():
            with contextlib.suppress(Exception):
                env.close()
        self.envs = {}


class RayEnvPool(BasePool):
    """Many envs, stepped together in Ray actors.

    Args:
        env_fns: one picklable zero-argument callable per env (e.g. ``EnvSpec``).
        envs_per_actor: envs held by one actor (``env.ray.envs_per_actor``).
        actor_num_cpus: CPUs each actor reserves (``env.ray.num_cpus``); fractions allowed.
        step_timeout: seconds per env call; a call's deadline is this times the most envs any one
            actor holds in the call, shared by all actors; late actors are killed and replaced
            (``None``: wait forever).
        address: Ray address (``env.ray.address``); ``None``: ``RAY_ADDRESS`` or a local Ray.
        worker_memory_mb: resident memory each actor may use (its envs together), enforced by a
            guard inside the actor as in the process pool (``None``: no limit). Ray's own
            ``memory`` option only reserves memory for scheduling; it enforces nothing.
        actor_options: extra ``ray.remote`` options for the actors (e.g. ``{"resources":
            {"envs": 1}}`` to place them on nodes that advertise an ``envs`` resource).
    """

    def __init__(
        self,
        env_fns: Sequence[EnvFn],
        envs_per_actor: int = 4,
        actor_num_cpus: float = 1.0,
        step_timeout: float | None = None,
        address: str | None = None,
        actor_options: dict[str, Any] | None = None,
        worker_memory_mb: float | None = None,
    ):
        if int(envs_per_actor) != envs_per_actor or envs_per_actor < 1:
            raise ValueError(
                f"env.ray.envs_per_actor must be an integer >= 1, got {envs_per_actor}"
            )
        if not (math.isfinite(actor_num_cpus) and actor_num_cpus >= 0):
            raise ValueError(f"env.ray.num_cpus must be a finite number >= 0, got {actor_num_cpus}")
        n = len(env_fns)
        super().__init__(env_fns, math.ceil(n / envs_per_actor), step_timeout, worker_memory_mb)
        self.num_actors = self.num_groups
        self.envs_per_actor = int(envs_per_actor)
        self._local: list = []
        self._actors: list[Any] = []
        self._pids: list[int | None] = []
        self._ray = _import_ray()
        self._owns_ray = self._connect(address, self.num_actors * actor_num_cpus)
        try:
            self._check_resources(actor_num_cpus)
            # two threads: one runs the calls (one at a time: the pool waits for each), the other
            # answers running() for an actor that missed its deadline
            options = {"num_cpus": actor_num_cpus, "max_restarts": 0, "max_concurrency": 2}
            options.update(actor_options or {})
            self._actor_cls = self._ray.remote(**options)(_EnvActor)
            self._actors = [self._start(a) for a in range(self.num_actors)]
            self._pids = [None] * self.num_actors
        except BaseException:
            self.close()
            raise

    # -- public API ----------------------------------------------------------------------------
    def close(self) -> None:
        """Close every env, kill every actor, and shut down the local Ray if this pool started it."""
        ray = self._ray
        if self._actors:
            refs = [a.close.remote() for a in self._actors]
            with contextlib.suppress(Exception):
                ray.wait(refs, num_returns=len(refs), timeout=5)
            for actor in self._actors:
                with contextlib.suppress(Exception):
                    ray.kill(actor, no_restart=True)
        self._actors = []
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        self._owns_ray = False

    def worker_pids(self) -> list[int]:
        """The process id of each actor (after they have built their envs)."""
        self._await_ready(list(range(self.num_actors)))
        return [int(p) for p in self._pids if p is not None]

    @property
    def actors(self) -> list[Any]:
        """The actor handles, one per group of ``envs_per_actor`` envs."""
        return list(self._actors)

    # -- internals -----------------------------------------------------------------------------
    def _connect(self, address: str | None, cpus_needed: float) -> bool:
        """Join or start Ray; True when this pool started it (and so must shut it down).

        A local Ray started here offers at least the CPUs this pool's actors reserve (like worker
        processes, more actors than cores share the cores), and its workers get this process's
        ``sys.path``.
        """
        ray = self._ray
        address = address or os.environ.get("RAY_ADDRESS") or None
        if ray.is_initialized():
            return False
        if address:
            ray.init(address=address, log_to_driver=False)
            return False
        paths = [os.path.abspath(p or os.curdir) for p in sys.path]
        ray.init(
            num_cpus=max(os.cpu_count() or 1, math.ceil(cpus_needed)),
            include_dashboard=False,
            log_to_driver=False,
            runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}},
        )
        return True

    def _check_resources(self, num_cpus: float) -> None:
        """Fail before any actor starts when the cluster cannot place them all at once."""
        total = float(self._ray.cluster_resources().get("CPU", 0.0))
        if num_cpus * self.num_actors > total:
            raise ValueError(
                f"{self.num_actors} env actors x env.ray.num_cpus={num_cpus:g} CPUs exceed the "
                f"Ray cluster's {total:g} CPUs: raise env.ray.envs_per_actor (now "
                f"{self.envs_per_actor}), lower env.ray.num_cpus, or add nodes"
            )

    def _start(self, a: int):
        return self._actor_cls.remote(self._group_envs(a), self.worker_memory_mb)

    def _await_ready(self, actors: list[int]) -> None:
        """Wait (untimed) until the actors are placed and have built their envs; raise if not."""
        ray = self._ray
        waiting = {self._actors[a].ready.remote(): a for a in actors if self._pids[a] is None}
        last = time.monotonic()
        while waiting:
            done, _ = ray.wait(list(waiting), num_returns=len(waiting), timeout=_PLACEMENT_WARN_S)
            for ref in done:
                a = waiting.pop(ref)
                try:
                    pid, why, traits = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    raise RuntimeError(
                        f"env actor {a} died while building its envs: {_short(exc)}"
                    ) from exc
                if why is not None:
                    raise RuntimeError(f"env actor {a}: {why}")
                self._pids[a] = pid
                for i, replayable in traits.items():
                    self._replayable[i] = replayable
            if waiting and time.monotonic() - last >= _PLACEMENT_WARN_S:
                last = time.monotonic()
                warnings.warn(
                    f"{len(waiting)} env actors not ready after {_PLACEMENT_WARN_S:g} s (still "
                    f"building envs, or waiting for CPUs: available {ray.available_resources()})",
                    stacklevel=2,
                )

    def _exchange(
        self,
        op: str,
        by_group: dict[int, list[tuple[int, tuple]]],
        budget: tuple[float | None, str],
    ) -> tuple[list[Reply], dict[int, WorkerFault]]:
        ray = self._ray
        self._await_ready(list(by_group))
        refs = {self._actors[a].run.remote(op, items): a for a, items in by_group.items()}
        seconds, late_why = budget
        done, late = ray.wait(list(refs), num_returns=len(refs), timeout=seconds)
        replies: list[Reply] = []
        failed: dict[int, WorkerFault] = {}
        for ref in done:
            a = refs[ref]
            try:
                answers = pickle.loads(ray.get(ref))
            except ray.exceptions.RayError as exc:
                # Ray does not say which env was running when the actor died: the pool runs the
                # actor's envs of this call again one at a time to find out.
                failed[a] = WorkerFault("crash", f"{self._who(a)} died: {_short(exc)}", None)
                continue
            replies.extend(answers)
            fault = memory_fault(answers)
            if fault is not None:
                failed[a] = fault
        for ref in late:
            a = refs[ref]
            failed[a] = WorkerFault("timeout", f"{self._who(a)} {late_why}", self._running(a))
        for a in failed:
            with contextlib.suppress(Exception):
                ray.kill(self._actors[a], no_restart=True)
            self._actors[a] = self._start(a)
            self._pids[a] = None
        return replies, failed

    def _who(self, a: int) -> str:
        return f"actor {a} (pid {self._pids[a]})"

    def _running(self, a: int) -> int | None:
        """The env late actor ``a`` hangs in (asked on its second thread), if it can say."""
        try:
            return self._ray.get(self._actors[a].running.remote(), timeout=_ASK_S)
        except Exception:
            return None


def _short(exc: BaseException) -> str:
    """The informative part of a Ray error: what happened, why the actor is dead, on which node."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    why = next((ln for ln in lines if ln.startswith("The actor is dead because")), None)
    if why:
        text += " " + why.split(" Some common causes")[0]
    ip = next((ln[3:].strip() for ln in lines if ln.startswith("ip:")), None)
    if ip:
        text += f" (node {ip})"
    return text[:600]
