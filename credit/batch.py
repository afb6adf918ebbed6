"""The step batch: one row per agent step, the input of every credit module.

Rows carry explicit ids (``group``, ``traj``, ``t``), so every estimator keys its statistics by
id and its result does not depend on row order. The batch is validated on construction; a
malformed batch raises :class:`StepBatchError` naming the column and the rows at fault, before any
credit computation starts.

Derived arrays that several modules need (factorised ids, episode returns, discounted returns,
per-trajectory step matrices) are computed once per batch and cached.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from functools import cached_property
from typing import Any

import numpy as np

from .columns import CONVERT, Column, StepBatchError, column, rows_text
from .ops import combine_codes

__all__ = [
    "COLUMNS",
    "COLUMN_NAMES",
    "Column",
    "StepBatch",
    "StepBatchError",
    "factorize",
    "to_hashable",
]


def _check_sums(what: str, per_row: np.ndarray) -> None:
    bad = ~np.isfinite(per_row)
    if bad.any():
        raise StepBatchError(
            f"{what} overflow float64 at {rows_text(bad)}: the rewards are too large; rescale them"
        )


def to_hashable(x: Any) -> Any:
    """A hashable stand-in for ``x``: lists, arrays and dicts become (nested) tuples."""
    if isinstance(x, np.ndarray):
        return (x.shape, tuple(x.ravel().tolist()))
    if isinstance(x, list | tuple):
        return tuple(to_hashable(e) for e in x)
    if isinstance(x, dict):
        return tuple(sorted((k, to_hashable(v)) for k, v in x.items()))
    if isinstance(x, set):
        return frozenset(to_hashable(e) for e in x)
    return x


def factorize(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Integer codes 0..k-1 for the distinct values of ``keys`` (any hashables); returns (codes, k).

    Numeric keys are coded in sorted order; other keys in order of first appearance (codes are
    labels only: no estimator depends on their order). Unhashable keys (lists, arrays, dicts) are
    compared by content.
    """
    keys = np.asarray(keys) if not isinstance(keys, np.ndarray) else keys
    if keys.dtype.kind in "iufb":
        uniq, codes = np.unique(keys, return_inverse=True)
        return codes.astype(np.int64).reshape(-1), len(uniq)
    items = keys.reshape(-1).tolist()
    try:
        table = {k: i for i, k in enumerate(dict.fromkeys(items))}
    except TypeError:
        items = [to_hashable(k) for k in items]
        table = {k: i for i, k in enumerate(dict.fromkeys(items))}
    codes = np.fromiter(map(table.__getitem__, items), dtype=np.int64, count=len(items))
    return codes, len(table)


@dataclass(frozen=True, eq=False)
class StepBatch:
    """Columnar batch of agent steps: one entry per step in every column.

    The columns are declared here once, each with its kind and meaning (:data:`COLUMNS` reads
    them); validation, :meth:`take`, :meth:`concat` and the trainer's construction
    (``agentrl.rollout.batch``) all derive from that declaration. Optional columns are ``None``
    when absent; ``extras`` carries any further named per-step columns (e.g. ``observation``
    text, ``turn_reward``).
    """

    group: np.ndarray = column("id", "task group id: the N rollouts of one task")
    traj: np.ndarray = column("id", "trajectory id, unique in the batch")
    t: np.ndarray = column("id", "step index in the trajectory, contiguous from 0")
    reward: np.ndarray = column("float", "env reward of the step (finite)")
    done: np.ndarray = column(
        "bool", "the episode ended at this step (only on a trajectory's last step)"
    )
    state_key: np.ndarray = column(
        "key", "canonical identity of the state the action was taken from (hashable)"
    )
    action_key: np.ndarray = column("key", "canonical action (hashable)")
    valid: np.ndarray = column("bool", "the action was valid")
    milestone: np.ndarray | None = column(
        "count", "number of milestones newly reached at this step", required=False
    )
    value: np.ndarray | None = column("float", "critic value V(s_t)", required=False)
    embedding: np.ndarray | None = column(
        "embedding", "(n, d) policy hidden state at the step", required=False
    )
    success: np.ndarray | None = column(
        "bool", "the trajectory ended in success (same on all its rows)", required=False
    )
    extras: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n: int | None = None
        for col in COLUMNS:
            values = getattr(self, col.name)
            if values is None and not col.required:
                continue
            arr = CONVERT[col.kind](col.name, values, n)
            if n is None:  # the first column sets the row count
                n = len(arr)
                if n == 0:
                    raise StepBatchError("the step batch is empty")
            object.__setattr__(self, col.name, arr)
        extras = {}
        for name, col in dict(self.extras).items():
            arr = col if isinstance(col, np.ndarray) else CONVERT["key"](name, col, n)
            if len(arr) != n:
                raise StepBatchError(f"extra column {name!r} has {len(arr)} rows, expected {n}")
            extras[name] = arr
        object.__setattr__(self, "extras", extras)
        self._check_ids()

    def _check_ids(self) -> None:
        """Each trajectory in one group, steps contiguous from 0, done only on the last step."""
        codes = self.traj_index
        n_traj = self.num_trajectories
        if (self.t < 0).any():
            raise StepBatchError(f"column 't' must be >= 0; negative at {rows_text(self.t < 0)}")
        lo = np.full(n_traj, np.iinfo(np.int64).max)
        hi = np.full(n_traj, np.iinfo(np.int64).min)
        np.minimum.at(lo, codes, self.group)
        np.maximum.at(hi, codes, self.group)
        mixed = (lo != hi)[codes]
        if mixed.any():
            ids = np.unique(self.traj[mixed])[:5].tolist()
            raise StepBatchError(
                f"trajectories {ids} span several groups (each trajectory belongs to one group) at {rows_text(mixed)}"
            )
        lengths = np.bincount(codes, minlength=n_traj)
        max_t = np.full(n_traj, -1, dtype=np.int64)
        np.maximum.at(max_t, codes, self.t)
        # t values of a trajectory are 0..T-1 exactly when they are distinct and max_t == T - 1.
        pair = codes * (int(self.t.max()) + 1) + self.t
        if len(np.unique(pair)) != len(pair):
            _, inv, counts = np.unique(pair, return_inverse=True, return_counts=True)
            raise StepBatchError(f"duplicate (traj, t) pairs at {rows_text(counts[inv] > 1)}")
        gap = max_t != lengths - 1
        if gap.any():
            bad = gap[codes]
            raise StepBatchError(
                f"steps of a trajectory are not contiguous from t=0 at {rows_text(bad)}"
            )
        early_done = self.done & (self.t != max_t[codes])
        if early_done.any():
            raise StepBatchError(
                f"'done' is set before the last step of a trajectory at {rows_text(early_done)}"
            )
        if self.success is not None:
            ref = np.zeros(n_traj, dtype=bool)
            ref[codes] = self.success
            if (ref[codes] != self.success).any():
                raise StepBatchError("column 'success' differs between rows of one trajectory")

    # -- sizes and factorised ids ---------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.group)

    @cached_property
    def _traj_codes(self) -> tuple[np.ndarray, int]:
        return factorize(self.traj)

    @property
    def traj_index(self) -> np.ndarray:
        """Per row, the trajectory as a code in ``0..num_trajectories-1``."""
        return self._traj_codes[0]

    @property
    def num_trajectories(self) -> int:
        return self._traj_codes[1]

    @cached_property
    def _group_codes(self) -> tuple[np.ndarray, int]:
        return factorize(self.group)

    @property
    def group_index(self) -> np.ndarray:
        """Per row, the group as a code in ``0..num_groups-1``."""
        return self._group_codes[0]

    @property
    def num_groups(self) -> int:
        return self._group_codes[1]

    @cached_property
    def traj_group(self) -> np.ndarray:
        """Per trajectory code, its group code."""
        out = np.empty(self.num_trajectories, dtype=np.int64)
        out[self.traj_index] = self.group_index
        return out

    @cached_property
    def traj_length(self) -> np.ndarray:
        """Per trajectory code, its number of steps."""
        return np.bincount(self.traj_index, minlength=self.num_trajectories)

    @cached_property
    def state_index(self) -> np.ndarray:
        """Per row, ``state_key`` as an integer code (equal keys, equal codes; across groups)."""
        return factorize(self.state_key)[0]

    @cached_property
    def action_index(self) -> np.ndarray:
        """Per row, ``action_key`` as an integer code."""
        return factorize(self.action_key)[0]

    @cached_property
    def _anchor_codes(self) -> tuple[np.ndarray, int]:
        return combine_codes(
            (self.group_index, self.num_groups), (self.state_index, int(self.state_index.max()) + 1)
        )

    @property
    def anchor_index(self) -> np.ndarray:
        """Per row, its anchor-state group: rows of one task group with equal ``state_key``."""
        return self._anchor_codes[0]

    @property
    def num_anchors(self) -> int:
        return self._anchor_codes[1]

    def history_levels(self, max_k: int) -> list[tuple[np.ndarray, int]]:
        """For k = 1..max_k, codes of (group, state keys of steps t-k+1..t); -1 where t < k-1.

        Level 1 is :attr:`anchor_index`. Level k extends level k-1 by one earlier state (one
        vectorised factorisation per level), so rows share a level-k code iff they are in the
        same task group and their last k states are equal.
        """
        if max_k < 1:
            raise ValueError(f"history length k must be >= 1, got {max_k}")
        codes, n = self.anchor_index, self.num_anchors
        levels = [(codes, n)]
        s_dim = int(self.state_index.max()) + 1
        mat = self.step_matrix
        for j in range(1, max_k):
            rows = np.flatnonzero(self.t >= j)  # these rows had a key at level j as well
            prev = mat[self.traj_index[rows], self.t[rows] - j]
            joint, n = combine_codes((codes[rows], max(n, 1)), (self.state_index[prev], s_dim))
            codes = np.full(len(self), -1, dtype=np.int64)
            codes[rows] = joint
            levels.append((codes, n))
        return levels

    @cached_property
    def traj_success(self) -> np.ndarray | None:
        """Per trajectory code, whether it succeeded (``None`` without a ``success`` column)."""
        if self.success is None:
            return None
        out = np.zeros(self.num_trajectories, dtype=bool)
        out[self.traj_index] = self.success
        return out

    # -- returns --------------------------------------------------------------------------------
    @cached_property
    def episode_return(self) -> np.ndarray:
        """Per trajectory code, the undiscounted sum of its rewards."""
        with np.errstate(over="ignore", invalid="ignore"):
            R = np.bincount(self.traj_index, weights=self.reward, minlength=self.num_trajectories)
        _check_sums("episode returns", R[self.traj_index])
        return R

    @cached_property
    def step_matrix(self) -> np.ndarray:
        """(num_trajectories, max_len) row indices of each trajectory's steps in order; -1 pads."""
        out = np.full((self.num_trajectories, int(self.traj_length.max())), -1, dtype=np.int64)
        out[self.traj_index, self.t] = np.arange(len(self))
        return out

    def discounted_returns(self, gamma: float, rewards: np.ndarray | None = None) -> np.ndarray:
        """Per row, G_t = sum_{j >= t} gamma^(j - t) r_j within its trajectory (``reward`` by default)."""
        r = self.reward if rewards is None else np.asarray(rewards, dtype=np.float64)
        return self.reverse_accumulate(r, gamma)

    def reverse_accumulate(self, values: np.ndarray, factor: float) -> np.ndarray:
        """Per row, y_t = x_t + factor * y_{t+1} within its trajectory (y after the last step = 0).

        Computed backwards over time, vectorised across trajectories (one numpy operation per
        time index, none per step), exact for any factor. Discounted returns use ``factor=gamma``;
        GAE uses the TD errors and ``factor=gamma*lambda``.
        """
        mat = self.step_matrix
        mask = mat >= 0
        padded = np.where(mask, np.asarray(values, dtype=np.float64)[np.where(mask, mat, 0)], 0.0)
        acc = np.zeros(mat.shape[0])
        out = np.empty_like(padded)
        with np.errstate(over="ignore", invalid="ignore"):
            for col in range(mat.shape[1] - 1, -1, -1):
                acc = padded[:, col] + factor * acc
                out[:, col] = acc
        result = np.empty(len(self))
        result[mat[mask]] = out[mask]
        _check_sums("discounted sums", result)
        return result

    def forward_cumsum(self, values: np.ndarray) -> np.ndarray:
        """Per row, sum of ``values`` over steps 0..t of its trajectory (inclusive)."""
        mat = self.step_matrix
        mask = mat >= 0
        padded = np.where(mask, np.asarray(values, dtype=np.float64)[np.where(mask, mat, 0)], 0.0)
        out = np.empty(len(self))
        out[mat[mask]] = np.cumsum(padded, axis=1)[mask]
        return out

    @cached_property
    def next_row(self) -> np.ndarray:
        """Per row, the row of the same trajectory's next step, or -1 after its last step."""
        mat = self.step_matrix
        nxt = np.full(len(self), -1, dtype=np.int64)
        has_next = self.t + 1 < self.traj_length[self.traj_index]
        rows = np.flatnonzero(has_next)
        nxt[rows] = mat[self.traj_index[rows], self.t[rows] + 1]
        return nxt

    @cached_property
    def prev_row(self) -> np.ndarray:
        """Per row, the row of the same trajectory's previous step, or -1 at t = 0."""
        prev = np.full(len(self), -1, dtype=np.int64)
        nxt = self.next_row
        has = nxt >= 0
        prev[nxt[has]] = np.flatnonzero(has)
        return prev

    # -- convenience ----------------------------------------------------------------------------
    def require(self, name: str, how: str) -> np.ndarray:
        """The optional column ``name``, or a :class:`StepBatchError` saying how to turn it on."""
        col = getattr(self, name) if name in COLUMN_NAMES else self.extras.get(name)
        if col is None:
            raise StepBatchError(f"this credit module needs the step-batch column {name!r}; {how}")
        return col

    def take(self, rows: np.ndarray) -> StepBatch:
        """A new batch with the given rows (for tests of row-order independence)."""
        cols = {c.name: getattr(self, c.name) for c in COLUMNS}
        return StepBatch(
            **{k: (None if v is None else v[rows]) for k, v in cols.items()},
            extras={k: v[rows] for k, v in self.extras.items()},
        )

    @classmethod
    def concat(cls, parts: Sequence[StepBatch]) -> StepBatch:
        """One batch with the rows of ``parts`` in order (their ids must already be distinct).

        An optional column must be present in every part or in none, and every part must carry
        the same extra columns (a column silently dropped would change what credit sees).
        """
        if not parts:
            raise ValueError("no step batches to concatenate")
        if len(parts) == 1:
            return parts[0]
        cols: dict[str, Any] = {}
        for c in COLUMNS:
            values = [getattr(p, c.name) for p in parts]
            present = [v is not None for v in values]
            if any(present) and not all(present):
                raise StepBatchError(f"column {c.name!r} is present in some parts, not in others")
            cols[c.name] = np.concatenate(values) if all(present) else None
        keys = set(parts[0].extras)
        for p in parts[1:]:
            if set(p.extras) != keys:
                raise StepBatchError(
                    f"extra columns differ across parts: {sorted(keys)} vs {sorted(p.extras)}"
                )
        extras = {k: np.concatenate([p.extras[k] for p in parts]) for k in sorted(keys)}
        return cls(**cols, extras=extras)

    @classmethod
    def from_trajectories(cls, trajectories: list[dict[str, Any]]) -> StepBatch:
        """Build a batch from per-trajectory dicts (handy for tests and small scripts).

        Each dict has ``group``, ``rewards`` and ``states`` (lists), and optionally ``actions``,
        ``valid``, ``milestones``, ``values``, ``success`` (bool); ``traj`` defaults to its
        position in the list. The last step of each trajectory is marked done.
        """
        cols: dict[str, list] = {c.name: [] for c in COLUMNS if c.required}
        opt: dict[str, list] = {"milestone": [], "value": [], "success": []}
        for k, tr in enumerate(trajectories):
            T = len(tr["rewards"])
            cols["group"] += [tr["group"]] * T
            cols["traj"] += [tr.get("traj", k)] * T
            cols["t"] += list(range(T))
            cols["reward"] += list(tr["rewards"])
            cols["done"] += [False] * (T - 1) + [True]
            cols["state_key"] += list(tr["states"])
            cols["action_key"] += list(tr.get("actions", ["a"] * T))
            cols["valid"] += list(tr.get("valid", [True] * T))
            opt["milestone"] += list(tr.get("milestones", [0] * T))
            opt["value"] += list(tr.get("values", [0.0] * T))
            opt["success"] += [bool(tr.get("success", False))] * T
        has = {
            k: any(k2 in tr for tr in trajectories)
            for k, k2 in (("milestone", "milestones"), ("value", "values"), ("success", "success"))
        }
        return cls(**cols, **{k: (v if has[k] else None) for k, v in opt.items()})


#: The declared columns of :class:`StepBatch`, in order (``extras`` is not one: its names are free).
COLUMNS: tuple[Column, ...] = tuple(
    Column(f.name, f.metadata["kind"], f.default is MISSING, f.metadata["help"])
    for f in fields(StepBatch)
    if "kind" in f.metadata
)
COLUMN_NAMES: frozenset[str] = frozenset(c.name for c in COLUMNS)
