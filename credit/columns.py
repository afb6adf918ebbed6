"""The step batch's column kinds: how each kind's values are checked and converted.

:class:`~agentrl.credit.batch.StepBatch` declares its columns with :func:`column` (a kind and a
one-line meaning per field); validation applies :data:`CONVERT` by kind, and a malformed column
raises :class:`StepBatchError` naming the column and the rows at fault.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["CONVERT", "Column", "StepBatchError", "column", "rows_text"]


class StepBatchError(ValueError):
    """A step batch that breaks the contract (lengths, dtypes, ids, non-finite values)."""


def rows_text(mask: np.ndarray, limit: int = 10) -> str:
    """``"rows [i, j, ...] (k in all)"``: where ``mask`` holds, for error messages."""
    rows = np.flatnonzero(mask)
    shown = ", ".join(map(str, rows[:limit]))
    return f"rows [{shown}{', ...' if len(rows) > limit else ''}] ({len(rows)} in all)"


def _as_int(name: str, values: Any, n: int | None) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise StepBatchError(f"column {name!r} must be one-dimensional, got shape {arr.shape}")
    if n is not None and len(arr) != n:
        raise StepBatchError(f"column {name!r} has {len(arr)} rows, expected {n}")
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind == "b":
        return arr.astype(np.int64)
    if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
        return arr.astype(np.int64)
    hint = (
        " (map string or uuid ids to integers with credit.factorize)"
        if arr.dtype.kind in "OUS"
        else ""
    )
    raise StepBatchError(f"column {name!r} must hold integers, got dtype {arr.dtype}{hint}")


def _as_float(name: str, values: Any, n: int, ndim: int = 1) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise StepBatchError(f"column {name!r} must hold numbers: {exc}") from exc
    if arr.ndim != ndim or len(arr) != n:
        raise StepBatchError(
            f"column {name!r} must have shape ({n}{', d' if ndim == 2 else ''}), got {arr.shape}"
        )
    bad = ~np.isfinite(arr) if ndim == 1 else ~np.isfinite(arr).all(axis=1)
    if bad.any():
        raise StepBatchError(f"column {name!r} has NaN or infinite values at {rows_text(bad)}")
    return arr


def _as_embedding(values: Any, n: int) -> np.ndarray:
    """(n, d) float array; float32 stays float32 (1,536-dim states for 40k steps are 245 MB)."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "f":
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise StepBatchError(f"column 'embedding' must hold numbers: {exc}") from exc
    if arr.ndim != 2 or len(arr) != n:
        raise StepBatchError(f"column 'embedding' must have shape ({n}, d), got {arr.shape}")
    bad = ~np.isfinite(
        arr.sum(axis=1)
    )  # one pass; a NaN or inf anywhere makes the row sum non-finite
    if bad.any():
        bad = ~np.isfinite(arr).all(axis=1)
        if bad.any():
            raise StepBatchError(
                f"column 'embedding' has NaN or infinite values at {rows_text(bad)}"
            )
    return arr


def _as_bool(name: str, values: Any, n: int) -> np.ndarray:
    arr = np.asarray(values)
    if arr.shape != (n,):
        raise StepBatchError(f"column {name!r} must have shape ({n},), got {arr.shape}")
    if arr.dtype.kind != "b":
        if arr.dtype.kind not in "iuf" or not np.isin(arr, (0, 1)).all():
            raise StepBatchError(f"column {name!r} must hold booleans, got dtype {arr.dtype}")
        arr = arr.astype(bool)
    return arr


def _as_keys(name: str, values: Any, n: int) -> np.ndarray:
    if isinstance(values, np.ndarray) and values.ndim == 1:
        arr = values
    else:
        values = list(values)
        arr = np.fromiter(values, dtype=object, count=len(values))
    if arr.shape != (n,):
        raise StepBatchError(f"column {name!r} must have shape ({n},), got {arr.shape}")
    return arr


def _as_count(name: str, values: Any, n: int) -> np.ndarray:
    arr = _as_int(name, values, n)
    if (arr < 0).any():
        raise StepBatchError(f"column {name!r} must be >= 0; negative at {rows_text(arr < 0)}")
    return arr


#: Per column kind: how values are checked and converted (``n`` rows; ``None`` for the first).
CONVERT: dict[str, Any] = {
    "id": _as_int,
    "count": _as_count,
    "float": _as_float,
    "bool": _as_bool,
    "key": _as_keys,
    "embedding": lambda name, values, n: _as_embedding(values, n),
}


def column(kind: str, help: str, *, required: bool = True) -> Any:
    """A step-batch column: its kind (a key of ``CONVERT``) and one-line meaning."""
    if kind not in CONVERT:
        raise ValueError(f"unknown column kind {kind!r} (one of {', '.join(CONVERT)})")
    meta = {"kind": kind, "help": help}
    return field(metadata=meta) if required else field(default=None, metadata=meta)


@dataclass(frozen=True)
class Column:
    """One declared column of the step batch (``agentrl.credit.batch.COLUMNS`` reads them from
    :class:`~agentrl.credit.batch.StepBatch`'s fields)."""

    name: str
    kind: str  # id, count (int >= 0), float, bool, key (any hashable), embedding ((n, d) floats)
    required: bool
    help: str
