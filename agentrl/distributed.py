"""Data-parallel runs under ``torchrun``: process group, rank helpers, sharding, gathering.

Everything here is a no-op in one process (no ``torchrun``, or ``--nproc_per_node=1``): rank 0 of
a world of 1, nothing is gathered or reduced, so the single-process path stays exactly as it is.

Under ``torchrun`` (it sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``PORT``):

- :func:`init_distributed` joins the process group with backend ``nccl`` when the run is on
  GPUs and ``gloo`` on CPU, chosen automatically, and pins each rank to GPU ``LOCAL_RANK``.
- :func:`shard_groups` gives each rank a contiguous block of an iteration's task groups; a group
  (the rollouts of one task) is never split, and the union over ranks is the global list for
  any world size, so the global batch of an iteration is the same set of tasks.
- :func:`gather_step_batch` concatenates the ranks' step batches in rank order. Since rank ``r``
  holds groups ``[a_r, b_r)`` and ranks are contiguous in order, the result is row for row the
  batch one process would build: credit runs on exactly the single-process steps (whatever the
  module: group-local ones and batch-wide ones such as GAE's whitening alike), and each rank then
  takes its own rows' advantages at ``offset .. offset + local rows``.
- :func:`reduce_metrics` combines per-rank metric rows (sums, maxima, weighted means);
  :func:`is_main` guards writing (metrics, summaries, the final model: rank 0 only).
- Failures: a rank that raises exits non-zero; ``torchrun`` then stops every other rank (they
  may be waiting in a collective) and reports the failing rank. :func:`record` (torch's
  ``elastic`` error recorder) wraps an entry point so that report carries the rank's exception
  and traceback instead of "To enable traceback see ...". :func:`all_ok` makes a per-rank
  condition collective, so every rank raises the same error at the same point (no hang).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from agentrl.credit import StepBatch

__all__ = [
    "DistInfo",
    "all_gather_objects",
    "all_ok",
    "barrier",
    "broadcast_object",
    "choose_backend",
    "close_distributed",
    "gather_step_batch",
    "has_process_group",
    "init_distributed",
    "init_single_rank",
    "is_distributed",
    "is_main",
    "launched_world_size",
    "rank",
    "record",
    "reduce_metrics",
    "shard_groups",
    "world_size",
]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits: ``rank`` of ``world_size``, GPU ``local_rank`` on its node."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None  # None: one process, no process group
    device: str = "cpu"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _dist():
    import torch.distributed as dist

    return dist


def launched_world_size() -> int:
    """``WORLD_SIZE`` as set by ``torchrun`` (1 when not launched by it)."""
    raw = os.environ.get("WORLD_SIZE", "1")
    try:
        n = int(raw)
    except ValueError as exc:
        raise ValueError(f"environment variable WORLD_SIZE={raw!r} is not an integer") from exc
    if n < 1:
        raise ValueError(f"environment variable WORLD_SIZE={n} must be >= 1")
    return n


def choose_backend(device: str) -> str:
    """``nccl`` for CUDA devices, ``gloo`` otherwise (CPU runs, and tests in CI)."""
    return "nccl" if str(device).startswith("cuda") else "gloo"


def init_distributed(device: str = "auto", timeout_s: float = 1800.0) -> DistInfo:
    """Join the process group when launched by ``torchrun`` with more than one process.

    ``device``: ``"auto"`` (CUDA when available, else CPU), ``"cpu"`` or ``"cuda"``. On CUDA each
    rank uses GPU ``LOCAL_RANK``. ``timeout_s`` bounds how long a collective waits for a rank
    (a rank that dies is detected sooner by ``torchrun``). Idempotent.
    """
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    n = launched_world_size()
    if n == 1:
        return DistInfo(device=device)
    dist = _dist()
    for key in ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        if key not in os.environ:
            raise RuntimeError(
                f"WORLD_SIZE={n} but {key} is not set: launch with torchrun "
                "(torchrun --nproc_per_node=N -m agentrl.train ...)"
            )
    rk, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    if device.startswith("cuda"):
        if torch.cuda.device_count() <= local:
            raise RuntimeError(
                f"rank {rk}: LOCAL_RANK={local} but this node has {torch.cuda.device_count()} "
                "GPUs; use --nproc_per_node <= the GPU count"
            )
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    backend = choose_backend(device)
    if not dist.is_initialized():
        kwargs: dict[str, Any] = {}
        if backend == "nccl":
            kwargs["device_id"] = torch.device(device)
        dist.init_process_group(
            backend, timeout=datetime.timedelta(seconds=float(timeout_s)), **kwargs
        )
    return DistInfo(dist.get_rank(), dist.get_world_size(), local, backend, device)


def init_single_rank(device: str = "auto") -> DistInfo:
    """A process group of one rank (no ``torchrun``): runs the FSDP2 and DCP code paths in one
    process, e.g. to measure a sharded learner on one GPU. Normal one-process runs do not need it."""
    import socket

    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dist = _dist()
    backend = choose_backend(device)
    if not dist.is_initialized():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        dist.init_process_group(
            backend, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1
        )
    return DistInfo(0, 1, 0, backend, device)


def close_distributed(wait: bool = True) -> None:
    """Leave the process group (if any).

    ``wait`` (a clean end): first wait at a barrier for every rank, so that no rank tears its
    connections down while another still works (rank 0 writes the outputs alone). A gloo rank that
    left early was seen to abort in teardown ("terminate called without an active exception").
    Pass ``wait=False`` when this rank failed: the others may never reach the barrier.
    """
    dist = _dist()
    if dist.is_available() and dist.is_initialized():
        if wait and dist.get_world_size() > 1:
            dist.barrier()
        dist.destroy_process_group()


def has_process_group() -> bool:
    """Whether a process group exists (``torchrun``, or :func:`init_single_rank`)."""
    dist = _dist()
    return dist.is_available() and dist.is_initialized()


def is_distributed() -> bool:
    dist = _dist()
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return _dist().get_rank() if is_distributed() else 0


def world_size() -> int:
    return _dist().get_world_size() if is_distributed() else 1


def is_main() -> bool:
    """Rank 0 (or the only process): the one that writes files and prints the progress bar."""
    return rank() == 0


def barrier() -> None:
    if is_distributed():
        _dist().barrier()


def record(fn: F) -> F:
    """Wrap an entry point so that ``torchrun`` reports a failing rank's exception and traceback."""
    from torch.distributed.elastic.multiprocessing.errors import record as _record

    return _record(fn)


# -- sharding ----------------------------------------------------------------------------------
def shard_groups(n_groups: int, world: int | None = None, rk: int | None = None) -> range:
    """The task groups rank ``rk`` of ``world`` owns: a contiguous block, sizes differing by <= 1.

    Ranks are in group order (rank 0 the first block), a group is never split, and the blocks of
    all ranks partition ``range(n_groups)`` whatever the world size. With more ranks than groups
    some ranks own none (they still take part in every collective).
    """
    world = world_size() if world is None else int(world)
    rk = rank() if rk is None else int(rk)
    if n_groups < 0:
        raise ValueError(f"n_groups must be >= 0, got {n_groups}")
    if world < 1 or not 0 <= rk < world:
        raise ValueError(f"rank {rk} is not in a world of {world}")
    base, extra = divmod(int(n_groups), world)
    start = rk * base + min(rk, extra)
    return range(start, start + base + (1 if rk < extra else 0))


# -- collectives -------------------------------------------------------------------------------
def all_gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj`` (picklable), in rank order; ``[obj]`` in one process."""
    if not is_distributed():
        return [obj]
    dist = _dist()
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank."""
    if not is_distributed():
        return obj
    box = [obj]
    _dist().broadcast_object_list(box, src=src)
    return box[0]


def all_ok(ok: bool, message: str = "") -> tuple[bool, list[str]]:
    """Whether ``ok`` holds on every rank, and the messages of the ranks where it does not.

    Lets every rank take the same branch (e.g. all raise the same error) instead of one rank
    raising while the others wait in the next collective.
    """
    flags = all_gather_objects((bool(ok), str(message)))
    bad = [f"rank {r}: {m}" for r, (good, m) in enumerate(flags) if not good]
    return not bad, bad


def gather_step_batch(local: StepBatch | None) -> tuple[StepBatch, int]:
    """The global step batch (ranks' rows in rank order) and this rank's first row in it.

    ``local`` is ``None`` on a rank that owns no groups. Group and trajectory ids must be global
    (see :func:`shard_groups`). In one process: ``(local, 0)``.
    """
    if not is_distributed():
        if local is None:
            raise ValueError("the step batch is empty")
        return local, 0
    parts = all_gather_objects(local)
    sizes = [0 if p is None else len(p.group) for p in parts]
    offset = int(sum(sizes[: rank()]))
    present = [p for p in parts if p is not None]
    if not present:
        raise ValueError("the step batch is empty on every rank")
    return StepBatch.concat(present), offset


# -- metrics -----------------------------------------------------------------------------------
#: Default rules of :func:`reduce_metrics`, by key prefix (first match wins).
SUM_PREFIXES = ("count/", "train/agent_steps", "train/prompt_tokens", "train/response_tokens")
MAX_PREFIXES = ("time/", "mem/")


def reduce_metrics(
    row: Mapping[str, Any],
    weight: float = 1.0,
    *,
    sum_prefixes: Sequence[str] = SUM_PREFIXES,
    max_prefixes: Sequence[str] = MAX_PREFIXES,
    sum_keys: Sequence[str] = (),
) -> dict[str, Any]:
    """Combine per-rank metric rows into one (the same result on every rank).

    Numbers under ``sum_prefixes``/``sum_keys`` are summed (counts); under ``max_prefixes`` the
    maximum is taken (wall time is the slowest rank's, memory the largest rank's); every other
    number is a mean weighted by ``weight`` (e.g. the rank's episode count), so per-rank means
    combine into the mean over all items. ``cpu/`` times are summed (the job's CPU time).
    Non-numbers (and booleans) are taken from rank 0. Keys missing on a rank are combined over the
    ranks that have them.
    """
    rows = all_gather_objects((dict(row), float(weight)))
    if len(rows) == 1:
        return dict(row)
    out: dict[str, Any] = {}
    keys: list[str] = []
    for r, _ in rows:
        keys += [k for k in r if k not in keys]
    for k in keys:
        vals = [(r[k], w) for r, w in rows if k in r]
        first = vals[0][0]
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v, _ in vals):
            out[k] = first
            continue
        nums = [float(v) for v, _ in vals]
        if k in sum_keys or k.startswith(tuple(sum_prefixes)) or k.startswith("cpu/"):
            total = float(sum(nums))
            out[k] = int(total) if all(isinstance(v, int) for v, _ in vals) else total
        elif k.startswith(tuple(max_prefixes)):
            out[k] = max(nums)
        else:
            ws = [w for _, w in vals]
            tot = sum(ws)
            out[k] = (
                float(sum(v * w for v, w in zip(nums, ws)) / tot) if tot > 0 else float(nums[0])
            )
    return out
