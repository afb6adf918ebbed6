"""The env pool's contract, shared by every backend: env recipes and :class:`BasePool` (output
checks, episode logs, cut episodes, restarts and replays).

Every result enters through :meth:`BasePool._settle`, so each backend (and a pool with no workers)
gets the same checks: a step whose output is malformed or that raised ends its episode as
truncated with ``info["error"]``; a reset that does raises ``RuntimeError``. A worker that crashes,
hangs or goes over its memory limit costs the episode of the env it was running: the pool restarts
it and replays every other live episode it held (each env's reset and actions since then), so those
go on as if nothing happened.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import gymnasium as gym

from agentrl import envs

from .checks import Fault, StepResult, check_reset, check_step, digest
from .worker import Reply, run_op

__all__ = [
    "BasePool",
    "EnvFn",
    "EnvSpec",
    "ResetSpec",
    "StepResult",
    "WorkerFault",
    "memory_fault",
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
    rollouts of one task together. ``opponent`` is for the episode loop's policy, never sent to
    the env: a frozen earlier policy plays the seats other than the learner's
    (``rollout.opponents``' ``pool``; :mod:`agentrl.rollout.opponents`)."""

    group: int
    seed: int | None = None
    options: dict[str, Any] | None = None
    opponent: dict[str, Any] | None = None


EnvFn = Callable[[], gym.Env]


class WorkerFault(NamedTuple):
    """A worker that failed a call: what happened and the env it was running (``None``: none
    of the call's envs had started, e.g. it was killed while idle)."""

    kind: str
    message: str
    culprit: int | None


def memory_fault(replies: list[Reply]) -> WorkerFault | None:
    """The fault of a worker that answered an env with a memory fault: it is over its limit and
    left the rest of the call undone, so it must be restarted."""
    for i, ok, value in replies:
        if ok is False and isinstance(value, Fault) and value.kind == "memory":
            return WorkerFault("memory", value.message, i)
    return None


@dataclass
class _Episode:
    """What replays an env's live episode: its reset, its actions, what it showed."""

    seed: int | None
    options: dict[str, Any] | None
    actions: list[str] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)


def env_name(fn: EnvFn) -> str:
    """A short name for an env recipe: the spec's env id, else the factory's name."""
    name = getattr(fn, "name", None)
    if isinstance(name, str):
        return name
    return str(getattr(fn, "__name__", None) or type(fn).__name__)


class BasePool:
    """Checks, episode bookkeeping, restarts and replays, shared by the backends.

    A backend sets ``self.num_groups`` (worker processes or actors; 0 keeps envs in
    ``self._local``, in this process) and implements :meth:`_exchange`: send each group its items,
    wait under one deadline, return every reply that came back and, per failed group, a
    :class:`WorkerFault`; a failed group's worker is replaced before it returns.

    Counters: ``restarts`` (workers replaced), ``replayed`` (episodes restored on a replacement).
    """

    def __init__(
        self,
        env_fns: Sequence[EnvFn],
        num_groups: int,
        step_timeout: float | None,
        worker_memory_mb: float | None = None,
    ):
        if step_timeout is not None and not step_timeout > 0:
            raise ValueError(f"step_timeout must be > 0 seconds or None, got {step_timeout}")
        if worker_memory_mb is not None and not worker_memory_mb > 0:
            raise ValueError(f"worker_memory_mb must be > 0 MiB or None, got {worker_memory_mb}")
        self.env_fns = list(env_fns)
        self.num_envs = len(self.env_fns)
        self.num_groups = min(num_groups, self.num_envs)
        self.step_timeout = step_timeout
        self.worker_memory_mb = worker_memory_mb
        self.restarts = 0
        self.replayed = 0
        self._names = [env_name(fn) for fn in self.env_fns]
        # Last observation/info per env: what a cut episode reports.
        self._last: list[tuple[str, dict[str, Any]]] = [("", {}) for _ in range(self.num_envs)]
        self._broken: dict[int, Fault] = {}  # env index -> why its episode was cut (until reset)
        self._episodes: list[_Episode | None] = [None] * self.num_envs
        self._replayable = [True] * self.num_envs  # workers report env.metadata["replayable"]

    # -- public API ----------------------------------------------------------------------------
    def reset(
        self,
        indices: Sequence[int] | None = None,
        seeds: Sequence[int | None] | None = None,
        options: Sequence[dict[str, Any] | None] | None = None,
    ) -> list[tuple[str, dict[str, Any]]]:
        """Reset the given envs (all by default); returns ``(observation, info)`` per env.

        An env whose reset fails or returns a malformed ``(observation, info)`` raises
        ``RuntimeError`` naming the env and the cause: a task that cannot start is a configuration
        error, not an episode outcome.
        """
        idx = self._indices(indices)
        results = []
        for i, (ok, value) in zip(idx, self.try_reset(idx, seeds, options)):
            if not ok:
                raise RuntimeError(f"reset of env {i} ({self._names[i]}) failed: {value}")
            results.append(value)
        return results

    def try_reset(
        self,
        indices: Sequence[int] | None = None,
        seeds: Sequence[int | None] | None = None,
        options: Sequence[dict[str, Any] | None] | None = None,
    ) -> list[tuple[bool, Any]]:
        """:meth:`reset` that reports each env's outcome instead of raising: ``(True,
        (observation, info))`` or ``(False, why)`` per env, every env run once (an env server
        answers each of its clients' resets this way)."""
        idx = self._indices(indices)
        seeds = list(seeds) if seeds is not None else [None] * len(idx)
        options = list(options) if options is not None else [None] * len(idx)
        if not len(seeds) == len(options) == len(idx):
            raise ValueError("indices, seeds and options must have the same length")
        out = self._dispatch("reset", idx, [(s, o) for s, o in zip(seeds, options)])
        return [(True, value) if ok else (False, value.message) for ok, value in out]

    def step(self, indices: Sequence[int], actions: Sequence[str]) -> list[StepResult]:
        """Step the given envs with one action each; returns one :class:`StepResult` per env.

        A step that raised, returned a malformed result, or whose worker crashed, hung or went
        over its memory limit while running it, comes back truncated with ``info["error"]``,
        ``info["error_kind"]`` and ``info["error_detail"]``; so does every later step of that env
        until it is reset.
        """
        idx = self._indices(indices)
        if len(actions) != len(idx):
            raise ValueError(f"{len(actions)} actions for {len(idx)} envs")
        live = [k for k, i in enumerate(idx) if i not in self._broken]
        out = dict(
            zip(live, self._dispatch("step", [idx[k] for k in live], [(actions[k],) for k in live]))
        )
        results: list[StepResult] = []
        for k, i in enumerate(idx):
            ok, value = out.get(k, (False, None))
            results.append(value if ok else self._cut(i))
        return results

    def call(self, indices: Sequence[int] | None, method: str, *args: Any) -> list[Any]:
        """Call ``env.<method>(*args)`` on the given envs (e.g. ``"expert_action"``).

        Raises ``RuntimeError`` naming the env when a call fails. Calls are not replayed after a
        restart: they must not change the env's state.
        """
        idx = self._indices(indices)
        values = []
        for i, (ok, value) in zip(idx, self.try_call(idx, method, *args)):
            if not ok:
                raise RuntimeError(f"env {i} ({self._names[i]}): {method}() failed: {value}")
            values.append(value)
        return values

    def try_call(
        self, indices: Sequence[int] | None, method: str, *args: Any
    ) -> list[tuple[bool, Any]]:
        """:meth:`call` that reports each env's outcome instead of raising: ``(True, result)``
        or ``(False, why)`` per env."""
        idx = self._indices(indices)
        out = self._dispatch("call", idx, [(method, args)] * len(idx))
        return [(True, value) if ok else (False, value.message) for ok, value in out]

    def end_episodes(self, indices: Sequence[int]) -> None:
        """Forget the running episodes of these envs (their user left: an env server's closed
        session): a restarted worker does not replay them. The envs stay; the next reset
        starts them again."""
        for i in self._indices(indices):
            self._episodes[i] = None

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

    def _cut(self, i: int) -> StepResult:
        """The truncated result of env ``i``'s cut episode: its last observation and info."""
        fault = self._broken[i]
        obs, info = self._last[i]
        line = fault.message.strip().splitlines()[0] if fault.message.strip() else "episode cut"
        info = dict(info, error=f"env {i} ({self._names[i]}): {line}", error_kind=fault.kind)
        info["error_detail"] = fault.message
        return StepResult(obs, 0.0, False, True, info)

    def _break(self, i: int, fault: Fault) -> None:
        self._broken[i] = fault
        self._episodes[i] = None

    def _settle(self, op: str, i: int, args: tuple, ok: bool, value: Any) -> tuple[bool, Any]:
        """Check one env's result where it enters the pool and keep the books it changes.

        Returns ``(True, result)`` or ``(False, Fault)``; a failed step cuts the episode.
        """
        if op == "step":
            if ok:
                value, fault = check_step(value)
                if fault is not None:
                    ok, value = False, fault
            if not ok:
                self._break(i, value)
                return False, value
            self._last[i] = (value.observation, value.info)
            ep = self._episodes[i]
            if ep is not None:
                if value.terminated or value.truncated:  # over: nothing left to restore
                    self._episodes[i] = None
                else:
                    ep.actions.append(args[0])
                    ep.digests.append(digest(value.observation))
                    ep.rewards.append(value.reward)
            return True, value
        if op == "reset":
            if ok:
                value, why = check_reset(value)
                if why is not None:
                    ok, value = False, Fault("observation", why)
            if not ok:
                self._episodes[i] = None
                return False, value
            self._broken.pop(i, None)
            self._last[i] = value
            if self.num_groups:  # envs in this process are never restarted: nothing to replay
                self._episodes[i] = _Episode(args[0], args[1], digests=[digest(value[0])])
            return True, value
        return ok, value

    def _dispatch(self, op: str, idx: list[int], args: list[tuple]) -> list[tuple[bool, Any]]:
        """Run ``op`` on the envs ``idx``; every result checked and booked."""
        if self.num_groups == 0:
            return [
                self._settle(op, i, a, *run_op(self._local[i], op, a)) for i, a in zip(idx, args)
            ]
        answers = self._round(op, list(zip(idx, args)))
        return [answers[i] for i in idx]

    def _round(
        self, op: str, items: list[tuple[int, tuple]], alone: bool = False
    ) -> dict[int, tuple]:
        """One message per group under one deadline. A failed group's culprit loses its episode,
        its other live episodes are replayed on the replacement, and its items that had not run
        run again: together when the culprit was known, else one at a time (``alone``), so that
        a fault that comes back is pinned on the env that was alone on the worker."""
        by_group: dict[int, list[tuple[int, tuple]]] = {}
        for i, a in items:
            by_group.setdefault(i % self.num_groups, []).append((i, a))
        args_of = dict(items)
        replies, failed = self._exchange(op, by_group, self._budget(op, by_group))
        answers: dict[int, tuple] = {}
        for i, ok, value in replies:
            if ok is not None:  # None: not run (the worker's memory guard had tripped)
                answers[i] = self._settle(op, i, args_of[i], ok, value)
        together: list[tuple[int, tuple]] = []
        one_by_one: list[tuple[int, tuple]] = []
        for g, wf in failed.items():
            self.restarts += 1
            culprit = wf.culprit
            if culprit is None and alone:  # it was the only env on a worker that was ready
                culprit = by_group[g][0][0]
            if culprit is not None and culprit not in answers:
                self._break(culprit, Fault(wf.kind, wf.message))
                answers[culprit] = (False, self._broken[culprit])
            waiting = [(i, a) for i, a in by_group[g] if i not in answers]
            self._restore(g, {i for i, _ in waiting} if op == "reset" else set())
            for i, a in waiting:
                if op == "step" and i in self._broken:  # its replay failed: the episode is cut
                    answers[i] = (False, self._broken[i])
                else:
                    (together if culprit is not None else one_by_one).append((i, a))
        if together:
            answers.update(self._round(op, together))
        for item in one_by_one:
            answers.update(self._round(op, [item], alone=True))
        return answers

    def _restore(self, g: int, skip: set[int]) -> None:
        """Replay every live episode of group ``g`` on its new worker; cut those that cannot be.

        An env that declares ``metadata["replayable"] = False`` is not replayed: its episode ends
        (``lost``). A replay that raises, or shows other observations or rewards than the episode
        did, ends that episode (``replay``). A worker that fails during the replays is replaced
        and every live episode replayed again (one at a time once the failure could not be
        pinned on one env); the env it was replaying loses its episode.
        """
        for i in self._group_envs(g):
            if self._episodes[i] is not None and i not in skip and not self._replayable[i]:
                why = "its worker was restarted and the env is not replayable"
                self._break(i, Fault("lost", f"{why} (metadata['replayable'] is False)"))
        alone = False
        while True:
            todo = [i for i in self._group_envs(g)
                    if self._episodes[i] is not None and i not in self._broken and i not in skip]  # fmt: skip
            restored, failure = 0, None
            for batch in [[i] for i in todo] if alone else [todo] if todo else []:
                items = [(i, (self._episodes[i].seed, self._episodes[i].options,
                              list(self._episodes[i].actions))) for i in batch]  # fmt: skip
                replies, failed = self._exchange(
                    "replay", {g: items}, self._budget("replay", {g: items})
                )
                for i, ok, value in replies:
                    if ok is None:
                        continue
                    why = (
                        self._replay_mismatch(i, value) if ok else f"replay failed: {value.message}"
                    )
                    if why is None:
                        restored += 1
                    else:
                        self._break(i, Fault("replay", why))
                if g in failed:
                    failure = (failed[g], batch)
                    break
            if failure is None:
                self.replayed += restored
                return
            wf, batch = failure
            self.restarts += 1
            culprit = wf.culprit if wf.culprit in batch else batch[0] if len(batch) == 1 else None
            if culprit is None:
                alone = True
            elif culprit not in self._broken:
                why = f"replaying its episode on a restarted worker failed: {wf.message}"
                self._break(culprit, Fault("replay", why))

    def _replay_mismatch(self, i: int, value: Any) -> str | None:
        """Why a replay of env ``i`` does not reproduce its episode, or ``None`` when it does."""
        ep = self._episodes[i]
        digests, rewards = value
        for t, (a, b) in enumerate(zip(ep.digests, digests)):
            if a != b:
                where = "the reset observation" if t == 0 else f"the observation after step {t}"
                return (f"replay diverged: {where} differs from the episode's (the env is not "
                        "deterministic given its reset and actions; declare "
                        "metadata['replayable'] = False)")  # fmt: skip
        for t, (a, b) in enumerate(zip(ep.rewards, rewards), start=1):
            if a != b:
                return f"replay diverged: the reward of step {t} was {a}, the replay gave {b}"
        return None

    def _exchange(
        self,
        op: str,
        by_group: dict[int, list[tuple[int, tuple]]],
        budget: tuple[float | None, str],
    ) -> tuple[list[Reply], dict[int, WorkerFault]]:
        """Send, wait (one deadline of ``budget`` seconds, counted once the workers are ready),
        restart failures: (replies, {group: what failed})."""
        raise NotImplementedError

    def _budget(self, op: str, by_group: dict[int, list]) -> tuple[float | None, str]:
        """The call's one deadline: ``step_timeout`` per env operation of the busiest worker.

        A worker runs its envs of a call one after another, so a worker holding k of them gets
        k x ``step_timeout`` (a replay counts its reset and every step); every worker shares that
        deadline, so hung workers never add up.
        """
        if self.step_timeout is None:
            return None, ""

        def cost(items: list) -> int:
            return sum(1 + len(a[2]) for _, a in items) if op == "replay" else len(items)

        most = max((cost(items) for items in by_group.values()), default=1)
        limit = self.step_timeout * most
        text = (
            f"timed out after {limit:g} s (step_timeout {self.step_timeout:g} s x {most} env calls)"
            if most > 1
            else f"timed out after {limit:g} s"
        )
        return limit, text
