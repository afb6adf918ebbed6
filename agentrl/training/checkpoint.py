"""Training checkpoints: atomic writes, only complete ones found again, safe and exact loading.

A checkpoint is ``<run>/checkpoints/iter_NNNNNN/state.pt``: the learner's state (model, value
head, optimiser, RNG), the metrics history and the initial evaluation. It is written into
``iter_NNNNNN.tmp/`` and renamed when complete, so an interrupted save never looks like a
checkpoint. Loading uses ``torch.load(weights_only=True)``: a crafted file cannot run code; the
few non-tensor types a checkpoint holds are plain containers and numbers. :func:`load_checkpoint`
then checks every entry's type (an integer iteration within the run, a list of metric rows...)
and :func:`agentrl.training.sharded_checkpoint.load_run_checkpoint` the learner's state against
the learner (exact names, shapes, dtypes, finite numbers). Every problem (a truncated, empty or
foreign file, a missing key, a wrong type, another model's weights) ends with one
:class:`CheckpointError` line naming the file and the mismatch; ``train`` exits 2 on it.
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
# the recipe writes them; tests and old runs may not (rollout_weights: staleness >= 1 only)
_OPTIONAL = ("initial_eval", "config", "rollout_weights")


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
    """The newest complete checkpoint of a run folder or its checkpoints folder; a checkpoint
    folder's own (``iter_NNNNNN``); or a file itself."""
    p = Path(path).expanduser()
    if p.is_file():
        return p
    if _COMPLETE.fullmatch(p.name) and (p / "state.pt").is_file():
        return p / "state.pt"
    for root in (checkpoint_dir(p), p):
        found = complete_checkpoints(root)
        if found:
            return found[-1] / "state.pt"
    raise CheckpointError(
        f"trainer.resume={path}: no complete checkpoint (checkpoints/iter_NNNNNN/state.pt) there"
    )


def load_checkpoint(path: Path, iterations: int | None = None) -> dict[str, Any]:
    """Load a checkpoint safely (tensors and plain containers only) and check its structure;
    with ``iterations`` (the run's ``trainer.iterations``) its iteration must lie within it."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - every way a file can be broken ends the same way
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path}: not a readable agentrl checkpoint ({reason})") from None
    if not isinstance(state, dict) or any(k not in state for k in _KEYS):
        have = sorted(map(str, state)) if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(
            f"{path}: not an agentrl checkpoint (expected keys {', '.join(_KEYS)}; found {have})"
        )
    problem = structure_problem(state, iterations)
    if problem:
        raise CheckpointError(f"{path}: {problem}")
    return state


def structure_problem(state: dict[str, Any], iterations: int | None = None) -> str | None:
    """What is wrong with a loaded checkpoint's entries (``None``: nothing). The learner's own
    state is checked against the learner when it is loaded."""
    unknown = sorted(str(k) for k in state if k not in _KEYS + _OPTIONAL)
    if unknown:
        return f"unknown entries {', '.join(unknown)} (expected {', '.join(_KEYS + _OPTIONAL)})"
    it = state["iteration"]
    if isinstance(it, bool) or not isinstance(it, int):
        return f"iteration is {it!r} ({type(it).__name__}), not an iteration number"
    if it < 0:
        return f"iteration is {it}, not an iteration number (>= 0)"
    if iterations is not None and it > iterations:
        return (
            f"the checkpoint is at iteration {it}, past this run's trainer.iterations="
            f"{iterations}: nothing would be trained (set trainer.iterations to {it} or more)"
        )
    history = state["history"]
    if not isinstance(history, list):
        return f"history is of type {type(history).__name__}, not a list of metric rows"
    for i, row in enumerate(history):
        if not isinstance(row, dict) or not all(isinstance(k, str) for k in row):
            return f"history[{i}] is not a metric row (a mapping of names to values)"
        step = row.get("iteration", 0)
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= it:
            return f"history[{i}] has iteration {step!r}, not one of 0..{it} (the checkpoint's)"
    for key in _OPTIONAL:
        if state.get(key) is not None and not isinstance(state[key], dict):
            return f"{key} is of type {type(state[key]).__name__}, not a mapping"
    for version, weights in (state.get("rollout_weights") or {}).items():
        if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version < it:
            return f"rollout_weights has version {version!r}, not one of 0..{it - 1}"
        if not isinstance(weights, dict) or not all(
            isinstance(k, str) and isinstance(t, torch.Tensor) for k, t in weights.items()
        ):
            return f"rollout_weights[{version}] is not a mapping of parameter names to tensors"
    if not isinstance(state["learner"], dict):
        return f"learner is of type {type(state['learner']).__name__}, not a learner state"
    return None


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
