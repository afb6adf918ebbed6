"""Learner checkpoints with ``torch.distributed.checkpoint`` (DCP): sharded, resharded on load.

One format for one process and for ``torchrun``: each rank writes its own shards of the
trainable weights and AdamW states (``__<rank>_0.distcp`` files plus a ``.metadata`` index),
keyed by parameter *names* (not optimiser indices), so a run saved by 2 ranks resumes in 1
process, and a run saved by 1 process resumes on 2 (DCP reshards on load). Frozen weights are
not saved: they are rebuilt from the model path (the LoRA base, the KL reference).

``save_learner(..., async_save=True)`` stages the tensors to memory and writes them in a
background thread (``dcp.async_save``); the returned future must be waited on (the next save
and :func:`wait` do) before the process exits. ``meta`` (iteration, history, config: anything
picklable) is written once, by rank 0, as ``meta.pt`` in the same folder.
"""

from __future__ import annotations

import contextlib
import warnings
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch

from .. import distributed as D
from .checkpoint import checkpoint_dir, complete_checkpoints

__all__ = ["is_checkpoint", "load_learner", "load_meta", "save_learner", "wait"]

META = "meta.pt"


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
        torch.save(dict(meta or {}), path / META)
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
    ``learner`` (all ranks call this); returns the ``meta`` that was saved with them."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    path = Path(path)
    if not is_checkpoint(path):
        raise FileNotFoundError(
            f"{path} is not a checkpoint folder (no .metadata written by torch.distributed.checkpoint)"
        )
    state = _state(learner)
    state["updates"] = torch.tensor(0)
    kwargs: dict[str, Any] = {"checkpoint_id": str(path)}
    if not D.has_process_group():
        kwargs["no_dist"] = True
    try:
        with _quiet():
            dcp.load(state, **kwargs)
    except Exception as exc:
        raise RuntimeError(
            f"cannot load the checkpoint {path} into this learner ({type(exc).__name__}: {exc}); "
            "was it saved for the same model and LoRA/value-head settings?"
        ) from exc
    set_state_dict(
        learner.trained_modules(),
        learner.optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optim"],
        options=_options(),
    )
    learner.updates = int(state["updates"])
    return load_meta(path)


def load_meta(path: str | Path) -> dict[str, Any]:
    f = Path(path) / META
    return torch.load(f, map_location="cpu", weights_only=False) if f.is_file() else {}


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
    ``Learner.state_dict`` (into a plain or a sharded learner)."""
    if is_sharded(learner_state):
        load_learner(learner, Path(state_file).parent / learner_state["path"])
    else:
        learner.load_state_dict(learner_state)
