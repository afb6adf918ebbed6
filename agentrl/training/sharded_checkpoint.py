"""Learner checkpoints with ``torch.distributed.checkpoint`` (DCP): sharded, resharded on load.

One format for one process and for ``torchrun``: each rank writes its own shards of the
trainable weights and AdamW states (``__<rank>_0.distcp`` files plus a ``.metadata`` index),
keyed by parameter *names* (not optimiser indices), so a run saved by 2 ranks resumes in 1
process, and a run saved by 1 process resumes on 2 (DCP reshards on load). Frozen weights are
not saved: they are rebuilt from the model path (the LoRA base, the KL reference).

``save_learner(..., async_save=True)`` stages the tensors to memory and writes them in a
background thread (``dcp.async_save``); the returned future must be waited on (the next save
and :func:`wait` do) before the process exits. ``meta`` (iteration, history, config: plain
JSON values) is written once, by rank 0, as ``meta.json`` in the same folder.

Loading runs no code from the files: DCP's own reader unpickles the ``.metadata`` index with
``pickle.load`` and its planner reads non-tensor entries (the optimiser's hyper-parameters) with
``torch.load(weights_only=False)``; here the index is unpickled with an allow-list of DCP's
metadata classes (:class:`_MetadataUnpickler`) and those entries with ``weights_only=True``
(:func:`_safe_io`), while tensors come through DCP's own ``weights_only=True`` reads. Before
anything is read the index is compared with the learner (:func:`_check_index`: the same
weights and optimiser tensors, shapes and dtypes) and after the read the values are
(finite numbers, the optimiser's hyper-parameter kinds). A problem is a :class:`CheckpointError`
naming the folder.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import pathlib
import pickle
import warnings
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch

from .. import distributed as D
from ..learner.state_check import StateMismatch, check_tensor, plain_value, same_kind
from .checkpoint import CheckpointError, checkpoint_dir, complete_checkpoints

__all__ = ["CheckpointError", "is_checkpoint", "load_learner", "load_meta", "save_learner", "wait"]

META = "meta.json"
_OLD_META = "meta.pt"  # written by earlier versions: read with weights_only=True


@contextlib.contextmanager
def _quiet():
    """DCP warns that it assumes one process when there is no process group: that is intended."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _options():
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(ignore_frozen_params=True)


def _state(learner) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(
        learner.trained_modules(), learner.optimizer, options=_options()
    )
    return {"model": model_sd, "optim": optim_sd}


def save_learner(
    learner, path: str | Path, meta: dict[str, Any] | None = None, *, async_save: bool = False
) -> Future | None:
    """Write ``learner``'s weights and optimiser state (all ranks call this) to folder ``path``.

    Returns the pending write when ``async_save`` (else ``None``, the write is done).
    """
    import torch.distributed.checkpoint as dcp

    path = Path(path)
    if D.is_main():
        path.mkdir(parents=True, exist_ok=True)
    D.barrier()
    state = _state(learner)
    state["updates"] = torch.tensor(int(learner.updates))
    if D.is_main():
        (path / META).write_text(json.dumps(dict(meta or {})))
    kwargs: dict[str, Any] = {"checkpoint_id": str(path)}
    if not D.has_process_group():
        kwargs["no_dist"] = True
    with _quiet():
        if async_save:
            res = dcp.async_save(state, **kwargs)
            return res.upload_completion if hasattr(res, "upload_completion") else res
        dcp.save(state, **kwargs)
    return None


def wait(pending: Future | None) -> None:
    """Block until an async save has been written (no-op for ``None``)."""
    if pending is not None:
        pending.result()


def is_checkpoint(path: str | Path) -> bool:
    return (Path(path) / ".metadata").is_file()


def load_learner(learner, path: str | Path) -> dict[str, Any]:
    """Load weights and optimiser state saved by :func:`save_learner` (any world size) into
    ``learner`` (all ranks call this); returns the ``meta`` that was saved with them. A folder
    that is no checkpoint, or one that does not fit the learner exactly, is a
    :class:`CheckpointError` naming it: missing or extra entries, shapes and dtypes are found
    before anything is read; non-finite values after the read (DCP reads into the learner's
    tensors in place, so a learner that raised is not to be used)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException
    from torch.distributed.checkpoint.state_dict import set_state_dict

    path = Path(path)
    if not is_checkpoint(path):
        raise CheckpointError(
            f"{path} is not a checkpoint folder (no .metadata written by torch.distributed.checkpoint)"
        )
    meta = load_meta(path)
    reader, planner = _safe_io()
    index = reader(path).read_metadata()  # a broken or crafted index: one line, not DCP's noise
    state = _state(learner)
    state["updates"] = torch.tensor(0)
    _add_group_keys(state["optim"]["param_groups"], index.state_dict_metadata)
    kwargs: dict[str, Any] = {"storage_reader": reader(path), "planner": planner()}
    if not D.has_process_group():
        kwargs["no_dist"] = True
    try:
        with _quiet():
            dcp.load(state, **kwargs)
    except (Exception, CheckpointException) as exc:  # noqa: BLE001 - DCP wraps rank errors
        mismatch = _find(exc, (StateMismatch, CheckpointError))
        if isinstance(mismatch, CheckpointError):
            raise mismatch from None
        reason = mismatch or _rank_failure(exc)
        raise CheckpointError(f"{path}: cannot load into this learner ({reason})") from None
    _check_loaded(path, state, learner)
    set_state_dict(
        learner.trained_modules(),
        learner.optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optim"],
        options=_options(),
    )
    learner.updates = int(state["updates"])
    return meta


def _add_group_keys(groups: list[dict[str, Any]], saved: dict[str, Any]) -> None:
    """Placeholders for the optimiser-group keys the checkpoint holds and a fresh learner lacks
    (the schedule's ``initial_lr``, set at the first update), so that they are loaded too: DCP
    reads only the keys of the state it loads into, and a resumed run needs the base rate."""
    for key in saved:
        parts = key.split(".")
        if len(parts) == 4 and parts[:2] == ["optim", "param_groups"] and parts[2].isdigit():
            i = int(parts[2])
            if i < len(groups) and parts[3] not in groups[i]:
                groups[i][parts[3]] = None


def _find(exc: BaseException, kinds: tuple[type, ...]) -> BaseException | None:
    """``exc`` or the first exception of ``kinds`` among its causes, contexts and (DCP's
    ``CheckpointException``) per-rank failures."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, kinds):
            return e
        todo += [x for x in (e.__cause__, e.__context__) if x is not None]
        failures = getattr(e, "failures", None)  # rank -> (exception, traceback)
        if isinstance(failures, dict):
            for x in failures.values():
                x = x[0] if isinstance(x, tuple) and x else x
                if isinstance(x, BaseException):
                    todo.append(x)
    return None


def load_meta(path: str | Path) -> dict[str, Any]:
    """The ``meta`` saved with a learner checkpoint (JSON; ``{}`` if none was saved)."""
    path = Path(path)
    f, old = path / META, path / _OLD_META
    try:
        if f.is_file():
            meta = json.loads(f.read_text())
        elif old.is_file():
            meta = torch.load(old, map_location="cpu", weights_only=True)
        else:
            return {}
    except Exception as exc:  # noqa: BLE001 - truncated, junk or a crafted pickle
        raise CheckpointError(
            f"{f if f.is_file() else old}: not readable ({_first_line(exc)})"
        ) from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{f}: holds a {type(meta).__name__}, not a mapping")
    return meta


# -- safe reading of DCP checkpoints -------------------------------------------------------------
# torch.distributed.checkpoint is imported on first use only (as in the functions above): a torch
# build without torch.distributed still trains in one process.
@functools.cache
def _metadata_globals() -> dict[tuple[str, str], Any]:
    """What a DCP ``.metadata`` pickle may refer to: DCP's metadata records, torch dtypes,
    layouts, memory formats, sizes and the path of the checkpoint id. Nothing that runs code."""
    import torch.distributed.checkpoint.filesystem as fs
    import torch.distributed.checkpoint.metadata as md

    records = ("Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
               "TensorProperties", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING")  # fmt: skip
    allowed: dict[tuple[str, str], Any] = {
        (md.__name__, n): getattr(md, n) for n in records if hasattr(md, n)
    }
    allowed[(fs.__name__, "_StorageInfo")] = fs._StorageInfo
    allowed[("torch", "Size")] = torch.Size
    allowed[("torch.serialization", "_get_layout")] = torch.serialization._get_layout
    for name in ("PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath", "Path"):
        allowed[("pathlib", name)] = getattr(pathlib, name)
    for name in dir(torch):
        value = getattr(torch, name, None)
        if isinstance(value, torch.dtype | torch.layout | torch.memory_format):
            allowed[("torch", name)] = value
    return allowed


class _MetadataUnpickler(pickle.Unpickler):
    """Unpickles a DCP index with an allow-list of globals (``pickle`` docs: restricting globals)."""

    def find_class(self, module: str, name: str) -> Any:
        found = _metadata_globals().get((module, name))
        if found is None:
            raise pickle.UnpicklingError(
                f"{module}.{name} is not part of a checkpoint index (refused: it could run code)"
            )
        return found


def _set(root: Any, keys: tuple, value: Any) -> None:
    for k in keys[:-1]:
        root = root[k]
    root[keys[-1]] = value


@functools.cache
def _safe_io() -> tuple[type, type]:
    """DCP's file reader and load planner, made safe: the reader unpickles the index with
    :class:`_MetadataUnpickler`; the planner reads non-tensor entries with
    ``weights_only=True`` and, before any read, checks the index against the state being
    loaded (:func:`_check_index`)."""
    from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
    from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
            path = self._get_metadata_path(kwargs.get("rank"))
            try:
                with self.fs.create_stream(path, "rb") as f:
                    metadata = _MetadataUnpickler(f).load()
            except Exception as exc:  # noqa: BLE001 - truncated, junk or crafted: one message
                raise CheckpointError(
                    f"{path}: not a readable checkpoint index ({_first_line(exc)})"
                ) from None
            if not isinstance(metadata, Metadata) or not isinstance(
                metadata.state_dict_metadata, dict
            ):
                raise CheckpointError(f"{path}: not a checkpoint index ({type(metadata).__name__})")
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    class SafePlanner(DefaultLoadPlanner):
        def set_up_planner(self, state_dict, metadata=None, is_coordinator=False) -> None:
            super().set_up_planner(state_dict, metadata, is_coordinator)
            _check_index(self.state_dict, metadata.state_dict_metadata if metadata else {})

        def load_bytes(self, read_item, value: io.BytesIO) -> None:
            obj = torch.load(value, map_location="cpu", weights_only=True)
            if self.flatten_state_dict:
                keys = tuple(self.mappings[read_item.dest_index.fqn])
                _set(self.original_state_dict, keys, obj)
            else:
                self.state_dict[read_item.dest_index.fqn] = obj

    return SafeReader, SafePlanner


def _rank_failure(exc: BaseException) -> str:
    """What failed, in one line: the first rank's error inside DCP's ``CheckpointException``."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        first = next(iter(failures.values()))
        exc = first[0] if isinstance(first, tuple) and first else exc
    if isinstance(exc, pickle.UnpicklingError):  # torch's weights_only refusal
        return "an entry holds objects no checkpoint holds (refused: loading it could run code)"
    if isinstance(exc, EOFError):
        return "EOFError: a shard file ends early (truncated?)"
    return f"{type(exc).__name__}: {_first_line(exc)}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _global(t: Any) -> tuple[tuple[int, ...], torch.dtype]:
    return tuple(int(s) for s in t.shape), t.dtype


def _check_index(flat: dict[str, Any], saved: dict[str, Any]) -> None:
    """The saved index holds every entry of ``flat`` (the learner's flattened state) with the
    same kind, shape and dtype, and no weight or optimiser tensor the learner lacks."""
    missing = sorted(k for k in flat if k not in saved)
    if missing:
        raise StateMismatch(
            f"the checkpoint lacks {len(missing)} of this learner's {len(flat)} entries "
            f"({', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''})"
        )
    extra = sorted(k for k in saved if k not in flat and k.startswith(("model.", "optim.state.")))
    if extra:
        raise StateMismatch(
            f"the checkpoint has {len(extra)} tensors this learner does not train "
            f"({', '.join(extra[:3])}{' ...' if len(extra) > 3 else ''})"
        )
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, TensorStorageMetadata

    for k, value in flat.items():
        md = saved[k]
        if isinstance(value, torch.Tensor):
            if not isinstance(md, TensorStorageMetadata):
                raise StateMismatch(f"{k} is saved as {type(md).__name__}, not as a tensor")
            shape, dtype = _global(value)
            if tuple(md.size) != shape:
                raise StateMismatch(
                    f"{k} has shape {tuple(md.size)}, this learner {shape} "
                    "(a checkpoint of another model or LoRA config?)"
                )
            if md.properties.dtype != dtype:
                raise StateMismatch(f"{k} has dtype {md.properties.dtype}, this learner {dtype}")
        elif not isinstance(md, BytesStorageMetadata):
            raise StateMismatch(f"{k} is saved as a tensor, this learner holds a value there")


def _check_loaded(path: Path, state: dict[str, Any], learner) -> None:
    """After the read: finite weights and optimiser tensors (each rank its shards; every rank
    raises together), optimiser hyper-parameters of the learner's kinds, a sane update count."""
    problem = None
    try:
        for prefix in ("model", "optim"):
            for name, t in _tensors(state[prefix], prefix):
                local = t.to_local() if hasattr(t, "to_local") else t
                check_tensor(name, local, tuple(local.shape), local.dtype)
        current = learner.optimizer.param_groups
        for i, (g, cur) in enumerate(zip(state["optim"]["param_groups"], current)):
            for k, v in g.items():
                fits = same_kind(cur[k], v) if k in cur else plain_value(v)
                if k != "params" and not fits:
                    raise StateMismatch(
                        f"optim.param_groups.{i}.{k} is {v!r}, not a hyper-parameter like this learner's"
                    )
        updates = int(state["updates"])
        if updates < 0:
            raise StateMismatch(f"updates is {updates}, not a count of updates")
    except StateMismatch as exc:
        problem = str(exc)
    ok, bad = D.all_ok(problem is None, problem or "")
    if not ok:  # every rank raises (a rank whose shards are fine names another's problem)
        raise CheckpointError(f"{path}: {problem or bad[0]}")


def _tensors(tree: Any, prefix: str):
    if isinstance(tree, torch.Tensor):
        yield prefix, tree
    elif isinstance(tree, dict):
        for k, v in tree.items():
            yield from _tensors(v, f"{prefix}.{k}")
    elif isinstance(tree, list | tuple):
        for i, v in enumerate(tree):
            yield from _tensors(v, f"{prefix}.{i}")


# -- the recipe's checkpoint folders under torchrun --------------------------------------------
#: What ``state.pt`` holds under ``"learner"`` when the learner's state is in DCP shards beside it.
SHARDED = {"format": "dcp", "path": "learner"}


def is_sharded(learner_state: Any) -> bool:
    """Whether a checkpoint's ``state["learner"]`` points to DCP shards (saved under torchrun)."""
    return isinstance(learner_state, dict) and learner_state.get("format") == "dcp"


def save_run_checkpoint(run: Path, it: int, state: dict[str, Any], learner, keep: int) -> Path:
    """Checkpoint ``it`` of ``run`` in the recipe's layout (``checkpoints/iter_NNNNNN/state.pt``,
    atomic rename, the newest ``keep`` kept: :mod:`agentrl.training.checkpoint`), with the learner's state
    as DCP shards in ``iter_NNNNNN/learner/`` written by every rank. All ranks call this; rank 0
    writes ``state.pt`` (``state`` without the learner) and renames the folder when complete."""
    import shutil

    root = checkpoint_dir(run)
    final = root / f"iter_{it:06d}"
    tmp = final.with_name(final.name + ".tmp")
    if D.is_main():
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    D.barrier()
    save_learner(learner, tmp / SHARDED["path"])
    D.barrier()
    if D.is_main():
        torch.save({"iteration": it, **state, "learner": dict(SHARDED)}, tmp / "state.pt")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        for old in complete_checkpoints(root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    D.barrier()
    return final


def load_run_checkpoint(learner, state_file: Path, learner_state: Any) -> None:
    """Load a checkpoint's learner state, sharded (DCP, any world size) or a one-process
    ``Learner.state_dict`` (into a plain or a sharded learner), exactly or not at all: a state
    that does not fit the learner is a :class:`CheckpointError` naming the file and the mismatch."""
    if is_sharded(learner_state):
        sub = learner_state.get("path")
        if set(learner_state) != {"format", "path"} or sub != SHARDED["path"]:
            raise CheckpointError(
                f"{state_file}: learner is {learner_state!r}, not the shard folder {SHARDED!r}"
            )
        load_learner(learner, Path(state_file).parent / sub)
        return
    try:
        learner.load_state_dict(learner_state)
    except StateMismatch as exc:
        raise CheckpointError(f"{state_file}: {exc}") from None
