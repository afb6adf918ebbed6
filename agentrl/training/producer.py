"""Where an iteration's training episodes come from: played in turn, or by a producer thread.

``rollout.staleness`` (``k``) chooses (:func:`make_rollouts`):

- ``k = 0``, :class:`SyncRollouts`: the synchronous loop. :meth:`~SyncRollouts.take` plays the
  iteration's groups there and then (:func:`agentrl.training.iteration.play_iteration`) and
  :meth:`~SyncRollouts.publish` hands the engine the new weights, exactly as the recipe always
  did.
- ``k >= 1``, :class:`Producer`: a thread plays whole task groups (every ``group_size`` rollout
  of a task, as GiGPO's anchor groups need) ahead of the learner, from its own copy of the policy
  (``Parts.engine_model``). Batch ``b`` is iteration ``b``'s tasks and sampling seed, and starts
  once the learner has published version ``b - k`` (a version counts learner updates, so the
  learner at iteration ``b`` holds version ``b``). The learner takes a group only if its oldest
  token is at most ``k`` versions old and counts what it drops: with this gate none is, the
  filter keeps the bound whatever the timing. A dropped group is replaced by the next one
  played, so a drop leaves the run's last iteration one group short (``async/short_groups``):
  it trains on what is left rather than wait for a batch that never comes. This is AReaL's bound (Fu et al. 2025, "AReaL: A
  Large-Scale Asynchronous Reinforcement Learning System for Language Reasoning",
  ``max_head_offpolicyness``: rollouts are submitted only while at most ``k`` batches ahead of
  the trainer's version); AReaL counts samples, we count whole iterations' batches.

Weights: :meth:`Producer.publish` copies the learner's trainable tensors (full tensors under
FSDP) into a snapshot and returns; the producer thread loads a snapshot between engine calls, so
the learner never waits for the engine and the engine never samples half-updated weights.

Partial rollouts (``rollout.partial_rollouts``): ``false`` (default) samples all of batch ``b``
with exactly version ``max(b - k, 0)``: every token is exactly ``k`` versions old, the run is
the same whatever the threads' timing (reproducible, like the synchronous loop), and with the
learner and the engine equally fast the overlap is full anyway (batch ``b + 1`` needs version
``b + 1 - k``, published before update ``b`` starts). ``true`` starts batch ``b`` from the newest
version at hand and loads newer ones at each later step of its episodes (one engine call is one
step of every live episode, so a response never mixes versions, and every rollout of a group
switches at the same step): fresher tokens when the producer is the slower side, at the price of
timing-dependent runs. Either way each step records the version that sampled it and the engine's
own log-probs of its tokens (``StepSequence.versions`` / ``old_logprobs``), so an off-policy
correction sees the exact behaviour policy of every token.

Dynamic sampling (``rollout.dynamic_sampling``) filters on the producer's thread, per batch, with
the synchronous loop's draws (:meth:`Producer._groups`): its extra groups are played right after
the batch with the batch's weights, so they obey the bound and stay deterministic; the learner
then takes the next batch whole (``when_short=keep``: maybe fewer than ``tasks_per_iter``).

Thread, not process: the env pool, the engine and the tokenizer are already built in this
process and stay there (a process would need them rebuilt and every episode pickled back); torch
releases the GIL inside its kernels, so the engine's forward passes run beside the learner's
backward passes; vLLM's engine core is its own process anyway. Each thread's torch ops use
``trainer.num_threads`` intra-op threads (default 1: on a 2-core machine the learner and the
producer each get one core).

Evaluation pauses the producer at its next batch boundary (:meth:`Producer.paused`), loads the
learner's current weights into the engine and plays on the main thread. Checkpoints hold no
in-flight groups: a resumed run regenerates them from ``(seed, iteration)``. Without partial
rollouts a checkpoint at version ``n`` also holds versions ``n - k .. n - 1`` of the trainable
tensors (:meth:`Producer.rollout_state`; with LoRA a few MB, with full fine-tuning ``k`` copies
of the model), so the resumed run samples its first ``k`` batches with the versions the
uninterrupted run used and continues exactly as it would. With partial rollouts the versions
depend on the threads' timing, in a resumed run as in any other: its first batches start from
the checkpoint's weights.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .. import distributed as D
from ..backends.base import Generation, SamplingParams
from ..config import ConfigError, TrainConfig
from ..rollout import EpisodeResult, RolloutStats, chunk_seed
from ..rollout.opponents import POOL, OpponentPool
from .checkpoint import complete_checkpoints, find_checkpoint, load_checkpoint
from .data_parallel import local_share
from .engine_sync import sync_engine
from .iteration import filter_groups, play_iteration, train_resets

__all__ = [
    "Batch",
    "GroupBuffer",
    "Producer",
    "ProducerError",
    "SyncRollouts",
    "make_rollouts",
    "snapshot",
]


class ProducerError(RuntimeError):
    """The rollout producer raised; the message is its exception's."""


class _Stopped(Exception):
    """Raised inside the producer thread when it is told to stop."""


# -- the synchronous loop ---------------------------------------------------------------------
class SyncRollouts:
    """``rollout.staleness = 0``: each iteration plays its groups when the learner asks, and the
    engine gets the weights after each update (the recipe's loop as it always was)."""

    def __init__(self, cfg: TrainConfig, train_ids, runner, learner, backend, engine_model, model):
        self.cfg, self.train_ids, self.runner = cfg, train_ids, runner
        self.learner, self.backend, self.engine_model, self.model = (
            learner,
            backend,
            engine_model,
            model,
        )

    #: frozen earlier policies (rollout.opponents' pool), offered every published version
    opponents: OpponentPool | None = None

    def start(self, it: int, history: dict[int, dict] | None = None) -> None:
        """Nothing runs ahead; the opponent pool (if any) may take the starting weights."""
        if self.opponents is not None:
            refill_pool(self.opponents, self.cfg.trainer.resume, it)
            self.opponents.offer(it)

    def rollout_state(self) -> dict[int, dict]:
        """Nothing to keep: iteration ``it`` samples with version ``it``."""
        return {}

    def take(self, it: int) -> tuple[list[EpisodeResult], dict[str, float], RolloutStats]:
        """Iteration ``it``'s episodes, its rollout metrics and its counts, played now."""
        stats = RolloutStats()
        eps, metrics = play_iteration(self.cfg, it, self.train_ids, self.runner, stats)
        return eps, metrics, stats

    def publish(self, version: int) -> dict[str, float]:
        """The learner's new weights into the engine; the sync's metrics (seconds, bytes)."""
        if self.engine_model is not None:  # torchrun: full weights into the engine's copy
            self.learner.sync_to(self.engine_model)
        if self.opponents is not None:
            self.opponents.offer(version)
        return sync_engine(self.cfg, self.backend, self.engine_model or self.model)

    def paused(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def close(self) -> None:
        pass


# -- weights ----------------------------------------------------------------------------------
@torch.no_grad()
def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A copy of ``model``'s trainable tensors by parameter name (full tensors of FSDP shards:
    a collective, every rank at once). Only they change in training (with LoRA: the adapters)."""
    out = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            full = p.full_tensor() if hasattr(p, "full_tensor") else p
            out[name] = full.detach().clone()
    return out


@torch.no_grad()
def load_snapshot(replica: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Copy a :func:`snapshot` into the engine's copy of the policy (same parameter names)."""
    own = dict(replica.named_parameters())
    for name, w in weights.items():
        if name not in own:
            raise KeyError(f"the rollout replica has no parameter {name!r}")
        own[name].copy_(w)


# -- the buffer ---------------------------------------------------------------------------------
@dataclass
class Batch:
    """One batch the producer played: iteration ``index``'s groups, their counts and timing."""

    index: int
    groups: list[list[EpisodeResult]]
    stats: RolloutStats
    play_s: float  # the producer's wall seconds playing it
    idle_s: float = 0.0  # the producer's wall seconds waiting before it (weights, pause)
    metrics: dict[str, float] = field(default_factory=dict)  # dynamic sampling's, if on
    taken: int = 0  # groups the learner has taken (or dropped) so far


def oldest_version(group: Sequence[EpisodeResult]) -> int | None:
    """The policy version of a group's oldest sampled token (``None``: no token)."""
    versions = [
        s.policy_version
        for ep in group
        for s in ep.steps
        if s.response_ids and s.agent not in ep.frozen  # a frozen opponent's are never trained
    ]
    return min(versions) if versions else None


def _add_stats(into: RolloutStats, other: RolloutStats) -> None:
    for f in dataclasses.fields(RolloutStats):
        a, b = getattr(into, f.name), getattr(other, f.name)
        if isinstance(a, dict):
            for k, v in b.items():
                a[k] = a.get(k, 0) + v
        else:
            setattr(into, f.name, a + b)


@dataclass
class GroupBuffer:
    """Played batches waiting for the learner, oldest first (thread-safe through ``cond``).

    :meth:`take` returns groups whose oldest token is at most ``k`` versions behind the
    learner's ``version``, dropping (and counting) older ones; it waits while too few are in.
    """

    k: int
    cond: threading.Condition = field(default_factory=threading.Condition)
    batches: deque = field(default_factory=deque)  # Batch, some of its groups maybe taken
    error: BaseException | None = None
    done: bool = False  # no batch will come any more (the producer played its last, or ended)
    dropped: int = 0  # groups dropped so far

    def put(self, batch: Batch) -> None:
        with self.cond:
            self.batches.append(batch)
            self.cond.notify_all()

    def queued(self) -> int:
        """Groups played and not yet taken."""
        with self.cond:
            return sum(len(b.groups) - b.taken for b in self.batches)

    def fail(self, exc: BaseException) -> None:
        with self.cond:
            self.error, self.done = exc, True
            self.cond.notify_all()

    def finish(self) -> None:
        with self.cond:
            self.done = True
            self.cond.notify_all()

    def check(self) -> None:
        """Raise the producer's exception (as :class:`ProducerError`), if it raised."""
        if self.error is not None:
            exc = self.error
            raise ProducerError(f"rollout producer failed: {type(exc).__name__}: {exc}") from exc

    def take(
        self, n: int | None, version: int
    ) -> tuple[list[list[EpisodeResult]], list[Batch], int]:
        """``(groups, the batches they start, groups dropped now)`` for a learner at ``version``:
        ``n`` groups, a dropped group replaced by the next one played; ``n = None``: the next
        batch whole, however many groups it holds (dynamic sampling's ``when_short=keep``), the
        one after it if every group of it is dropped. Once the producer has played its last
        batch (:meth:`finish`) the groups left are all there is: fewer than ``n`` come back
        (each drop made the last iteration one group short), none at all is an error."""
        out, batches, dropped = [], [], 0
        with self.cond:
            while n is None or len(out) < n:
                self.check()
                if not self.batches:
                    if self.done and out:  # nothing more comes: a short batch, not a hang
                        break
                    if self.done:
                        left = "its next batch" if n is None else f"{n} of {n} groups"
                        raise ProducerError(f"rollout producer ended with {left} left to give")
                    self.cond.wait()
                    continue
                batch = self.batches[0]
                if batch.taken == 0 and (not batches or batches[-1] is not batch):
                    batches.append(batch)
                if batch.taken >= len(batch.groups):  # all taken (or none played: keep)
                    self.batches.popleft()
                    whole_dropped = bool(batch.groups) and not out
                    if n is None and not whole_dropped:
                        break
                    continue
                group = batch.groups[batch.taken]
                batch.taken += 1
                oldest = oldest_version(group)
                if oldest is not None and version - oldest > self.k:
                    dropped += 1
                    continue
                out.append(group)
            self.dropped += dropped
            self.cond.notify_all()
        return out, batches, dropped


# -- the producer --------------------------------------------------------------------------------
class _VersionedBackend:
    """The producer's view of the engine: before each call it loads newer weights (partial
    rollouts) or stops; each generation records the version that sampled it."""

    def __init__(self, backend: Any, producer: Producer):
        self.backend, self.producer = backend, producer

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        sampling: SamplingParams,
        allowed: Sequence[Sequence[Sequence[int]] | None] | None = None,
        **stream: Any,  # on_tokens, for an engine that streams
    ) -> list[Generation]:
        self.producer._between_calls()
        gens = self.backend.generate(prompts, sampling, allowed, **stream)
        if self.producer.in_flight:  # the engine's own per-token labels, as learner versions
            self.producer._relabel(gens)
            return gens
        v = self.producer.engine_version
        for g in gens:
            g.extra["policy_version"] = v
        return gens

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        self.backend.update_weights(state_dict)

    def close(self) -> None:
        pass  # the recipe's runner owns the engine

    def __getattr__(self, name: str) -> Any:  # anything else is the engine's
        return getattr(self.backend, name)


class Producer:
    """``rollout.staleness = k >= 1``: a thread playing iterations ``start..iterations-1``'s
    groups ahead of the learner, each batch starting once the learner has published version
    ``b - k`` (see the module docstring). ``play`` plays one batch (tests give a fake one)."""

    def __init__(
        self,
        cfg: TrainConfig,
        train_ids: list[str] | None,
        runner: Any,
        learner: Any,
        backend: Any,
        engine_model: torch.nn.Module,
        *,
        play: Callable[[int, Any, RolloutStats], list[EpisodeResult]] | None = None,
        load: Callable[[dict], None] | None = None,
        take_snapshot: Callable[[], dict] | None = None,
    ):
        r = cfg.rollout
        if r.staleness < 1:
            raise ValueError(f"a producer needs rollout.staleness >= 1, got {r.staleness}")
        self.cfg, self.train_ids, self.learner = cfg, train_ids, learner
        self.k, self.partial = int(r.staleness), bool(r.partial_rollouts)
        self.backend, self.engine_model = backend, engine_model
        # an engine whose syncs keep requests in flight (a fleet in keep mode): the learner's
        # thread pushes each version at once, mid-call, and replies label their tokens
        self.in_flight = self.partial and bool(getattr(backend, "keep_in_flight", False))
        self._apply_lock = threading.Lock()  # one load at a time (learner or producer thread)
        self._labels: dict[int, int] = {}  # in flight: the engine's version label -> version
        self.runner = copy.copy(runner)  # the same pool, prompt and format; a versioned engine
        self.runner.backend = _VersionedBackend(backend, self)
        self._play = play or self._play_batch
        self._load = load or self._load_weights
        self._snapshot = take_snapshot or (lambda: snapshot(learner.model))
        self.buffer = GroupBuffer(self.k)
        self.cond = self.buffer.cond  # one lock for weights, pauses and the buffer
        self.weights: dict[int, dict] = {}  # published versions the producer may still load
        self.recent: dict[int, dict] = {}  # the last k + 1 published versions (checkpoints)
        self.floor = 0  # the oldest version a batch may use: max(b - k, floor)
        self.latest = -1  # the newest published version
        self.engine_version = -1  # the version the engine holds
        self._stop = False
        self._pause_wanted, self._is_paused = False, False
        self._thread: threading.Thread | None = None
        self.start_it = 0
        self.idle_s = 0.0  # the producer's waiting since the learner's last take
        self.opponents: OpponentPool | None = None  # rollout.opponents' pool, offered each version

    # -- the learner's side ------------------------------------------------------------------
    def start(self, it: int, history: dict[int, dict] | None = None) -> None:
        """Publish the learner's weights as version ``it`` and start playing batch ``it`` on.

        ``history``: a resumed run's :meth:`rollout_state` (versions ``it - k .. it - 1``), so
        its first batches use the versions the uninterrupted run used; without it (a fresh run,
        partial rollouts) they use version ``it``."""
        self.start_it = it
        self.floor = it
        if self.opponents is not None:
            refill_pool(self.opponents, self.cfg.trainer.resume, it)
        if history and not self.partial:
            have = {int(v): w for v, w in history.items() if max(it - self.k, 0) <= int(v) < it}
            while self.floor - 1 in have:  # the contiguous versions just before it
                self.floor -= 1
                self.weights[self.floor] = self.recent[self.floor] = have[self.floor]
        self.publish(it)
        self._apply(it)  # the engine starts from the learner's weights (a resumed run's too)
        threads = torch.get_num_threads()  # the run's torch threads (trainer.num_threads)
        self._thread = threading.Thread(
            target=self._run, args=(threads,), name="agentrl-producer", daemon=True
        )
        self._thread.start()

    def publish(self, version: int) -> dict[str, float]:
        """Hand the producer the learner's weights as ``version`` (a copy; returns at once; the
        producer's engine syncs are not timed into the learner's rows: ``{}``)."""
        weights = self._snapshot()
        if self.opponents is not None:  # the same copy (never written to) in the pool
            self.opponents.offer(version, weights)
        with self.cond:
            self.weights[version] = weights
            if not self.partial:  # what a checkpoint needs to resume exactly
                self.recent[version] = weights
                for v in [v for v in self.recent if v < version - self.k]:
                    del self.recent[v]
            self.latest = version
            if self.partial:  # only the newest is ever loaded
                for v in [v for v in self.weights if v < version]:
                    del self.weights[v]
            self.cond.notify_all()
        if self.in_flight and self._thread is not None:  # into the engine now, mid-call
            self._apply(version)
        return {}

    def take(self, it: int) -> tuple[list[EpisodeResult], dict[str, float], RolloutStats]:
        """Iteration ``it``'s groups (the learner holds version ``it``), its metrics and counts."""
        r = self.cfg.rollout
        # dynamic sampling: the next batch whole, filtered by the producer (pad: n groups, keep:
        # maybe fewer); without it: this rank's share of the iteration's groups
        n = None if r.dynamic_sampling else len(D.shard_groups(r.tasks_per_iter))
        groups, batches, dropped = self.buffer.take(n, it)
        stats = RolloutStats()
        for b in batches:
            _add_stats(stats, b.stats)
        # the batch trained on (the last one taken); under torchrun a collective of every rank
        sampled = _dynamic_metrics(batches[-1].metrics, r.group_size) if r.dynamic_sampling else {}
        ages = [
            it - s.policy_version
            for g in groups
            for ep in g
            for s in ep.steps
            if s.agent not in ep.frozen
            for _ in s.response_ids
        ]
        with self.cond:
            idle, self.idle_s = self.idle_s, 0.0
        metrics = {
            **sampled,
            "async/dropped_groups": float(dropped),
            "async/dropped_groups_total": float(self.buffer.dropped),
            "async/staleness_mean": float(np.mean(ages)) if ages else 0.0,
            "async/staleness_max": float(max(ages)) if ages else 0.0,
            "async/producer_play_s": float(sum(b.play_s for b in batches)),
            "async/producer_idle_s": float(idle),
            "async/queued_groups": float(self.buffer.queued()),
            # groups the last iteration lacks: earlier drops were filled from later batches
            "async/short_groups": float(n - len(groups)) if n is not None else 0.0,
        }
        return [ep for g in groups for ep in g], metrics, stats

    def rollout_state(self) -> dict[int, dict[str, torch.Tensor]]:
        """What a checkpoint at the learner's newest version ``n`` holds so that a run resumed
        from it plays batches ``n .. n + k - 1`` with the versions this run uses: versions
        ``max(n - k, floor) .. n - 1`` (CPU copies of the trainable tensors). Empty with partial
        rollouts, whose versions depend on the threads' timing anyway."""
        with self.cond:
            kept = {v: w for v, w in self.recent.items() if v < self.latest}
        return {
            v: {k: t.detach().to("cpu", copy=True) for k, t in w.items()} for v, w in kept.items()
        }

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The engine and the pool to the caller, with the learner's newest weights: the
        producer stops at its next batch boundary until the block ends (held-out evaluation)."""
        with self.cond:
            self._pause_wanted = True
            self.cond.notify_all()
            while not self._is_paused and self._alive():
                self.buffer.check()
                self.cond.wait(0.1)
            self.buffer.check()
        try:
            self._apply(self.latest)
            yield
        finally:
            with self.cond:
                self._pause_wanted = False
                self.cond.notify_all()

    def close(self) -> None:
        """Stop the thread (at its next engine call at the latest) and give the engine the
        learner's newest weights (the final model and evaluation read them); idempotent."""
        with self.cond:
            self._stop = True
            self.cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=120)
            if self._thread.is_alive():
                raise ProducerError("rollout producer did not stop within 120 s")
            self._thread = None
            if self.latest >= 0 and self.buffer.error is None:
                self._apply(self.latest)

    # -- the producer's side ------------------------------------------------------------------
    def _alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self, threads: int) -> None:
        # a new thread starts with OpenMP's default team size, not the run's: vLLM's CPU attention
        # refuses a batch planned with one thread count and run with another
        torch.set_num_threads(threads)
        try:
            for b in range(self.start_it, self.cfg.trainer.iterations):
                t0 = time.perf_counter()
                target = max(b - self.k, self.floor)
                with self.cond:  # the weights batch b may use, and no pause asked for
                    while not self._stop and (self.latest < target or self._pause_wanted):
                        self._is_paused = self._pause_wanted
                        self.cond.notify_all()
                        self.cond.wait()
                    self._is_paused = False
                    if self._stop:
                        return
                    version = self.latest if self.partial else target
                idle = time.perf_counter() - t0
                self._apply(version)
                if not self.partial:  # a fixed lag never goes back to an older version
                    with self.cond:
                        for v in [v for v in self.weights if v < version]:
                            del self.weights[v]
                stats = RolloutStats()
                t1 = time.perf_counter()
                groups, metrics = self._groups(b, stats)
                with self.cond:
                    self.idle_s += idle
                play_s = time.perf_counter() - t1
                self.buffer.put(Batch(b, groups, stats, play_s, idle, metrics))
            self.buffer.finish()  # the learner takes what is left, never waits for more
            with self.cond:  # all played: stay pausable until told to stop
                while not self._stop:
                    self._is_paused = True
                    self.cond.notify_all()
                    self.cond.wait()
        except _Stopped:
            return
        except BaseException as exc:  # noqa: BLE001 (handed to the learner, which raises it)
            self.buffer.fail(exc)
            return
        finally:
            self.buffer.finish()

    def _between_calls(self) -> None:
        """Before each engine call: stop if told to; partial rollouts load newer weights."""
        with self.cond:
            if self._stop:
                raise _Stopped
        if self.partial:
            self._apply(self.latest)

    def _apply(self, version: int) -> None:
        """Load published ``version`` into the engine (no-op when it holds it already); with
        partial rollouts always the newest (publishing drops the older ones)."""
        with self._apply_lock:
            with self.cond:
                if self.partial:
                    version = self.latest
                if version == self.engine_version:
                    return
                weights = self.weights[version]
            self._load(weights)
            self.engine_version = version
            if self.in_flight:
                self._labels[int(self.backend.version)] = version

    def _relabel(self, gens: list[Generation]) -> None:
        """In flight: each token's engine label as the learner's version; a generation's
        version is its oldest token's (what the staleness bound reads)."""
        with self._apply_lock:  # a sync under way has recorded its label once it returns
            for g in gens:
                labels = g.extra.get("token_versions") or [g.extra.get("policy_version", -1)]
                try:
                    versions = [self._labels[int(v)] for v in labels]
                except KeyError as exc:
                    raise ProducerError(f"the engine sampled with weights labelled {exc}, "
                                        "which this producer never loaded") from None  # fmt: skip
                g.extra["token_versions"] = versions
                g.extra["policy_version"] = min(versions)

    def _load_weights(self, weights: dict) -> None:
        load_snapshot(self.engine_model, weights)
        sync_engine(self.cfg, self.backend, self.engine_model)  # vLLM: its own weights (or adapter)

    def _groups(self, b: int, stats: RolloutStats) -> tuple[list[list[EpisodeResult]], dict]:
        """Batch ``b``'s groups and (dynamic sampling) its ``rollout/dynamic_sampling/*``
        metrics. Dynamic sampling filters here, on the producer's thread, with the synchronous
        loop's draws: the first is the batch itself, extra draw ``d`` takes its tasks from
        ``(seed, b, d)`` and its sampling seed from ``chunk_seed(seed, b, 2, d)`` (under torchrun
        mixed with the rank: each rank filters its own share within its share of the budget,
        its extra groups numbered apart from the other ranks'). Extra draws run before batch
        ``b + 1`` with the batch's weights (version ``max(b - k, 0)`` without partial
        rollouts), so they obey the bound and the run stays the same whatever the timing."""
        r = self.cfg.rollout
        g = r.group_size

        def split(eps: list[EpisodeResult]) -> list[list[EpisodeResult]]:
            return [eps[i : i + g] for i in range(0, len(eps), g)]

        if not r.dynamic_sampling:
            return split(self._play(b, self.runner, stats)), {}
        total = r.tasks_per_iter * g if r.max_extra_rollouts is None else r.max_extra_rollouts
        n = len(D.shard_groups(r.tasks_per_iter))
        budget = total * n // r.tasks_per_iter  # this rank's share (all of it in one process)
        # extra groups numbered from tasks_per_iter, each rank in its own range of them
        first = r.tasks_per_iter + (D.rank() * (total // g) if D.is_distributed() else 0)
        drawn = {"draws": 0, "groups": 0}

        def draw(k: int) -> list[list[EpisodeResult]]:
            d = drawn["draws"]
            drawn["draws"] = d + 1
            if d == 0:  # the batch itself (as without dynamic sampling)
                return split(self._play(b, self.runner, stats))
            eps = self._play_extra(b, d, k, first + drawn["groups"], stats)
            drawn["groups"] += k
            return split(eps)

        return filter_groups(self.cfg, n, budget, draw)

    def _play_extra(
        self, b: int, d: int, k: int, first_group: int, stats: RolloutStats
    ) -> list[EpisodeResult]:
        """Dynamic sampling's extra draw ``d`` of batch ``b``: ``k`` more groups numbered from
        group ``first_group`` of the iteration (trajectory ids from ``first_group *
        group_size``), as :func:`~agentrl.training.iteration.play_iteration` draws them."""
        cfg, r = self.cfg, self.cfg.rollout
        salt = (1000 + D.rank(),) if D.is_distributed() else ()
        resets = train_resets(cfg, b, self.train_ids, k, draw=d, first_group=first_group,
                              salt=salt)  # fmt: skip
        seed = chunk_seed(cfg.seed, b, 2, d, *salt)
        return self.runner.play(resets, temperature=r.temperature, seed=seed,
                                traj_offset=first_group * r.group_size, stats=stats)  # fmt: skip

    def _play_batch(self, b: int, runner: Any, stats: RolloutStats) -> list[EpisodeResult]:
        """Iteration ``b``'s groups (this rank's share), sampled with iteration ``b``'s seed.
        Under torchrun each rank plays alone (no lockstep: the learner's collectives own the
        process group), so its seed is mixed with its rank."""
        cfg, r = self.cfg, self.cfg.rollout
        resets, first = local_share(train_resets(cfg, b, self.train_ids), r.group_size)
        seed = chunk_seed(cfg.seed, b, 2, *([1000 + D.rank()] if D.is_distributed() else []))
        return runner.play(resets, temperature=r.temperature, seed=seed, traj_offset=first,
                           stats=stats)  # fmt: skip


_SUMMED = ("dropped_groups", "extra_groups", "extra_rollouts", "short", "drawn_rollouts")


def _dynamic_metrics(metrics: dict[str, float], group_size: int) -> dict[str, float]:
    """A batch's ``rollout/dynamic_sampling/*`` metrics; under torchrun every rank's summed
    (``rounds``: the most any rank drew; ``informative_fraction``: over all ranks' groups), as
    the synchronous loop, which filters all groups at once, reports them (a collective: every
    rank calls it each iteration, on the learner's thread)."""
    if not D.is_distributed():
        return dict(metrics)
    ranks = D.all_gather_objects(metrics)
    pre = "rollout/dynamic_sampling/"
    out = {pre + k: float(sum(m[pre + k] for m in ranks)) for k in _SUMMED}
    out[pre + "rounds"] = float(max(m[pre + "rounds"] for m in ranks))
    drawn_groups = out[pre + "drawn_rollouts"] / group_size
    out[pre + "informative_fraction"] = 1.0 - out[pre + "dropped_groups"] / max(drawn_groups, 1)
    return {k: out[k] for k in metrics}


def make_rollouts(cfg: TrainConfig, parts: Any) -> SyncRollouts | Producer:
    """The iteration's episode source ``rollout.staleness`` asks for (see the module docstring),
    with an opponent pool when ``rollout.opponents`` draws ``pool``."""
    p = parts
    pool = opponent_pool(cfg, p)
    p.runner.opponents = pool  # the producer's copy of the runner shares it
    if cfg.rollout.staleness == 0:
        source: SyncRollouts | Producer = SyncRollouts(
            cfg, p.train_ids, p.runner, p.learner, p.backend, p.engine_model, p.model
        )
    else:
        source = Producer(cfg, p.train_ids, p.runner, p.learner, p.backend, p.engine_model)
    source.opponents = pool
    return source


def opponent_pool(cfg: TrainConfig, parts: Any) -> OpponentPool | None:
    """The pool of frozen earlier policies ``rollout.opponents`` plays against (``None`` when it
    draws no ``pool``): a frozen copy of the policy on a transformers engine; the rollout source
    offers it every version it publishes (:meth:`OpponentPool.offer` keeps the due ones)."""
    r = cfg.rollout
    if not r.opponents or not float(r.opponents.get(POOL, 0.0)) > 0:
        return None
    if D.is_distributed():
        raise ConfigError("invalid config: rollout.opponents: pool plays in one process only "
                          "(not under torchrun)")  # fmt: skip
    return OpponentPool(
        parts.model,
        parts.tokenizer,
        every=r.opponent_pool.every,
        size=r.opponent_pool.size,
        extra=r.staleness + 1 if r.staleness else 0,
        max_batch_size=r.max_batch_size,
        max_batch_tokens=r.max_batch_tokens,
        seed=cfg.seed,
    )


def refill_pool(pool: OpponentPool, resume: str | None, start: int) -> list[int]:
    """A resumed run's opponent pool: the versions before ``start`` it would hold that the run's
    checkpoints keep (their learner state is the trainable tensors of that version), so a run
    resumed with those checkpoints draws the opponents the uninterrupted run draws. Returns the
    versions loaded (none for a fresh run)."""
    if not resume or start == 0:
        return []
    root = find_checkpoint(resume).parent.parent  # <run>/checkpoints
    due = [int(d.name[5:]) for d in complete_checkpoints(root)]
    due = [v for v in due if v < start and v % pool.every == 0][-pool.keep :]
    for v in due:
        state = load_checkpoint(root / f"iter_{v:06d}" / "state.pt")
        pool.offer(v, state["learner"]["model"])
    return due
