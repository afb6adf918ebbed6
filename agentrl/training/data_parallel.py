"""The data-parallel steps of a training iteration, as the recipe calls them (one process: no-ops).

Under ``torchrun`` every rank plays a share of the iteration's task groups with its own env pool
and generation engine, then:

- :func:`local_share` picks this rank's groups out of the iteration's global reset list (a group
  is never split; the global list is the one a single process plays) and the global index of
  its first episode (its trajectory ids start there, so ids are global);
- :func:`global_step_batch` builds this rank's step batch, gathers every rank's into the global
  batch (row for row the single-process batch, see :func:`agentrl.distributed.gather_step_batch`)
  and renumbers this rank's learner sequences to their global rows: credit is computed on the
  global batch (every rank computes the same), the learner reads each rank's own rows;
- :func:`play_as_one_process` plays a list of resets as one process would, every rank a share
  of each of its chunks in lockstep, and gathers the episodes on every rank (held-out
  evaluation; dynamic sampling's draws, whose groups every rank then chooses alike);
- :func:`gather_episodes` collects the episodes of all ranks without their token ids (for the
  iteration's metrics and the evaluation report); :func:`reduce_stats` sums token counts and
  takes the slowest rank's times;
- :func:`rollout_replica` is the unsharded copy of the policy a rank's engine samples from while
  the learner's copy is sharded; ``FSDPLearner.sync_to`` refreshes it after each update.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import distributed as D
from ..rollout import EpisodeResult, ResetSpec, RolloutStats, to_step_batch

__all__ = [
    "gather_episodes",
    "global_step_batch",
    "local_share",
    "lockstep",
    "play_as_one_process",
    "reduce_stats",
    "rollout_replica",
]


def local_share(resets: Sequence[ResetSpec], group_size: int) -> tuple[list[ResetSpec], int]:
    """This rank's whole groups of ``resets`` (``group_size`` consecutive specs per group) and
    the global index of its first episode."""
    if group_size < 1 or len(resets) % group_size:
        raise ValueError(
            f"{len(resets)} reset specs do not make whole groups of group_size={group_size}"
        )
    groups = D.shard_groups(len(resets) // group_size)
    start = groups.start * group_size
    return list(resets[start : groups.stop * group_size]), start


def _light(ep: EpisodeResult) -> EpisodeResult:
    """``ep`` without token ids, log-probs and allowed-token lists (metrics need none of them)."""
    steps = [
        dataclasses.replace(s, prompt_ids=[], response_ids=[], logprobs=[], allowed=None)
        for s in ep.steps
    ]
    return dataclasses.replace(ep, steps=steps)


def gather_episodes(eps: Sequence[EpisodeResult], whole: bool = False) -> list[EpisodeResult]:
    """All ranks' episodes in rank order, without their token ids unless ``whole`` (in one
    process: ``eps`` itself, tokens included)."""
    if not D.is_distributed():
        return list(eps)
    mine = list(eps) if whole else [_light(ep) for ep in eps]
    return [ep for part in D.all_gather_objects(mine) for ep in part]


def global_step_batch(
    eps: Sequence[EpisodeResult],
    values: np.ndarray | None = None,
    embeddings: np.ndarray | None = None,
):
    """``(global batch, this rank's sequences with global step rows, this rank's first row)``.

    ``values``/``embeddings`` are this rank's, one per local step (as ``to_step_batch`` takes).
    """
    if not D.is_distributed():
        batch, seqs = to_step_batch(eps, values=values, embeddings=embeddings)
        return batch, seqs, 0
    local, seqs = to_step_batch(eps, values=values, embeddings=embeddings) if eps else (None, [])
    batch, offset = D.gather_step_batch(local)
    if offset:
        seqs = [dataclasses.replace(s, step_row=s.step_row + offset) for s in seqs]
    return batch, seqs, offset


def play_as_one_process(
    runner: Any,
    resets: Sequence[ResetSpec],
    *,
    temperature: float,
    seed: int,
    traj_offset: int = 0,
    stats: RolloutStats | None = None,
    whole: bool = False,
) -> list[EpisodeResult]:
    """Every episode one process would play for ``resets``, on every rank; in one process,
    ``runner.play``'s own episodes.

    One process plays ``resets`` in chunks of its pool; every rank's pool together is that pool
    (``rollout.tasks_per_iter`` groups). So each chunk is split in rank order, each rank taking as
    many resets as its pool holds (possibly none), played in lockstep with the chunk's seed and
    trajectory ids, and gathered: sampled episodes are one process's, not just equally valid
    draws. ``whole``: gather with token ids (to train on); else without (to report).
    """
    if not D.is_distributed():
        return runner.play(resets, temperature=temperature, seed=seed, traj_offset=traj_offset,
                           stats=stats)  # fmt: skip
    sizes = D.all_gather_objects(len(runner.pool))
    chunk, first = sum(sizes), sum(sizes[: D.rank()])  # one process's pool; where ours starts
    out: list[EpisodeResult] = []
    for start in range(0, len(resets), chunk):
        part = resets[start : start + chunk]
        lo, hi = min(first, len(part)), min(first + len(runner.pool), len(part))
        eps = runner.play(part[lo:hi], temperature=temperature, seed=seed, seed_start=start,
                          traj_offset=traj_offset + start + lo, stats=stats,
                          step_sync=lockstep())  # fmt: skip
        out += gather_episodes(eps, whole=whole)
    return out


def lockstep() -> Callable[[int], tuple[int, bool]] | None:
    """The rollout loop's ``step_sync`` for this rank (``None`` in one process).

    Each step, every rank reports its live episode count; a rank's requests are numbered from
    the live count of the ranks before it (its groups come after theirs in the global list), so
    request ids, hence per-request sampling streams, are those of one process playing the whole
    list; the ranks step until no episode is live on any of them (a rank whose episodes all
    ended still answers each step). Every rank must play the same number of chunks (one each
    when the pool holds the rank's whole share, as the recipe builds it).
    """
    if not D.is_distributed():
        return None
    rk = D.rank()

    def sync(n_live: int) -> tuple[int, bool]:
        counts = D.all_gather_objects(int(n_live))
        return int(sum(counts[:rk])), sum(counts) > 0

    return sync


def reduce_stats(stats: RolloutStats) -> RolloutStats:
    """Token and call counts summed over ranks; times the slowest rank's (they ran in parallel)."""
    parts = D.all_gather_objects(dataclasses.asdict(stats))
    if len(parts) == 1:
        return stats
    out: dict[str, Any] = {}
    for f in dataclasses.fields(RolloutStats):
        vals = [p[f.name] for p in parts]
        if isinstance(vals[0], dict):  # counts by kind (env errors): summed key by key
            keys = sorted({k for v in vals for k in v})
            out[f.name] = {k: sum(v.get(k, 0) for v in vals) for k in keys}
        else:
            out[f.name] = max(vals) if f.name.endswith("_s") else sum(vals)
    return RolloutStats(**out)


def rollout_replica(model):
    """An unsharded copy of the policy for this rank's generation engine (made before the
    learner shards the policy; ``FSDPLearner.sync_to`` keeps it current)."""
    replica = copy.deepcopy(model)
    replica.eval()
    for p in replica.parameters():
        p.requires_grad_(False)
    return replica


def reduce_times(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its per-rank measurements combined: ``time/`` and ``mem/`` the largest rank's
    (wall time is the slowest rank's), ``cpu/`` summed (the job's CPU time). Every other value is
    already global (gathered episodes, the global batch's credit, the sharded update's losses)."""
    if not D.is_distributed():
        return row
    local = {k: v for k, v in row.items() if k.startswith(("time/", "mem/", "cpu/"))}
    return {**row, **D.reduce_metrics(local)}


class RankLog:
    """The metrics log of a rank other than 0: keeps the history (checkpoints store it), writes
    nothing (rank 0 writes ``metrics.jsonl`` and TensorBoard)."""

    def __init__(self, history: list[dict]):
        self.history = history

    def __call__(self, row: dict[str, Any]) -> None:
        self.history.append(row)

    def close(self) -> None:
        pass


class QuietProgress:
    """The progress bar of a rank other than 0: silent (one bar per job, rank 0's)."""

    def update(self, done: int, row: dict) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass
