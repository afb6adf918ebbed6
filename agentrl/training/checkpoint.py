"""Training checkpoints: atomic writes, only complete ones found again, safe loading.

A checkpoint is ``<run>/checkpoints/iter_NNNNNN/state.pt``: the learner's state (model, value
head, optimiser, RNG), the metrics history and the initial evaluation. It is written into
``iter_NNNNNN.tmp/`` and renamed when complete, so an interrupted save never looks like a
checkpoint. Loading uses ``torch.load(weights_only=True)``: a crafted file cannot run code; the
few non-tensor types a checkpoint holds are plain containers and numbers. A truncated, empty or
foreign file ends with one :class:`CheckpointError` line naming the file.
"""

from __future__ import annotations

import copy
import re
import shutil
from pathlib import Path
from typing import Any

import torch

__all__ = ["CheckpointError", "find_checkpoint", "load_checkpoint", "save_checkpoint", "save_model"]

_COMPLETE = re.compile(r"iter_\d{6}")
_KEYS = ("iteration", "learner", "history")


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete or not one of ours (the message names the file)."""


def checkpoint_dir(run: Path) -> Path:
    return Path(run) / "checkpoints"


def save_checkpoint(run: Path, it: int, state: dict[str, Any], keep: int) -> Path:
    """Write ``state`` as checkpoint ``it`` of ``run`` atomically; keep the newest ``keep``."""
    root = checkpoint_dir(run)
    final = root / f"iter_{it:06d}"
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save({"iteration": it, **state}, tmp / "state.pt")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in complete_checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def complete_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoint folders, oldest first (temporary folders of interrupted saves excluded)."""
    if not root.is_dir():
        return []
    return sorted(
        p
        for p in root.iterdir()
        if p.is_dir() and _COMPLETE.fullmatch(p.name) and (p / "state.pt").is_file()
    )


def find_checkpoint(path: str | Path) -> Path:
    """The newest complete checkpoint of a run folder, its checkpoints folder, or a file itself."""
    p = Path(path).expanduser()
    if p.is_file():
        return p
    for root in (checkpoint_dir(p), p):
        found = complete_checkpoints(root)
        if found:
            return found[-1] / "state.pt"
    raise CheckpointError(
        f"trainer.resume={path}: no complete checkpoint (checkpoints/iter_NNNNNN/state.pt) there"
    )


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a checkpoint safely (tensors and plain containers only) and check its structure."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - every way a file can be broken ends the same way
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path}: not a readable agentrl checkpoint ({reason})") from None
    if not isinstance(state, dict) or any(k not in state for k in _KEYS):
        have = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(
            f"{path}: not an agentrl checkpoint (expected keys {', '.join(_KEYS)}; found {have})"
        )
    return state


def save_model(run: Path, model: Any, tokenizer: Any, name: str = "final") -> Path:
    """The policy as a Hugging Face folder (LoRA merged), loadable by transformers and vLLM."""
    d = checkpoint_dir(run) / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    if hasattr(model, "merge_and_unload"):
        model = copy.deepcopy(model).merge_and_unload()
    model.save_pretrained(d, safe_serialization=True)
    tokenizer.save_pretrained(d)
    return d
