"""HiPER's three-head value targets for one update, and the loss of its three heads."""

from __future__ import annotations

import numpy as np
import torch

from .losses import value_loss

__all__ = ["ValueRows"]


class ValueRows:
    """HiPER's three-head value targets for one update: (N, 3) returns, which heads train on which
    rows (``weights``), and per sequence the response position of V_low (``pos``). Each head's
    loss is the mean over the mini-batch rows that train it (the reference's masked token-mean
    with one value token per turn); the three are summed (its high/term coefficients are 1)."""

    def __init__(self, returns: np.ndarray, weights: np.ndarray, pos: list[int]):
        self.returns, self.weights, self.pos = returns, weights, pos

    @classmethod
    def make(cls, head, seqs, returns, weights, pos) -> ValueRows | None:
        if head is None or head.out_features == 1:
            return None
        R = np.asarray(returns, dtype=np.float32)
        if R.ndim != 2 or R.shape[1] != 3:
            raise ValueError(f"a 3-output value head needs (N, 3) returns, got {R.shape}")
        W = np.ones_like(R) if weights is None else np.asarray(weights, dtype=np.float32)
        if W.shape != R.shape:
            raise ValueError(f"value_weights has shape {W.shape}, expected {R.shape}")
        p = [0] * len(seqs) if pos is None else [int(x) for x in pos]
        if len(p) != len(seqs) or any(
            not 0 <= x < max(1, len(s.response_ids)) for x, s in zip(p, seqs)
        ):
            raise ValueError("value_pos needs one response position per sequence, inside it")
        return cls(R, W, p)

    def row_denominators(self, rows) -> np.ndarray:
        """Per head, how many of the mini-batch's step ``rows`` train it (at least 1)."""
        return np.maximum(self.weights[np.asarray(rows, dtype=np.int64)].sum(0), 1.0)

    def loss(self, pred, rows, old_values, denom, cfg) -> torch.Tensor:
        dev = pred.device
        tgt = torch.as_tensor(self.returns[rows], device=dev)
        w = torch.as_tensor(self.weights[rows], device=dev)
        old = (
            torch.as_tensor(np.asarray(old_values, np.float32)[rows], device=dev)
            if old_values is not None
            else pred.detach()
        )
        per = value_loss(pred, old, tgt, cfg.value_clip) * w
        return (per.sum(0) / torch.as_tensor(denom, dtype=per.dtype, device=dev)).sum()
