"""Per-token quantities of the loss for a few chosen step rows (trajectory traces read them).

The learner calls :meth:`TokenCapture.take` from every micro-batch's loss; the capture keeps, for
each chosen step row, the first pass over it in the update (epoch 1: the weights may already have
taken the earlier mini-batches' steps): the learner's log-prob of every response token, π_old
(the engine's log-prob, or the learner's recomputed one under ``trainer.old_logprobs=learner``),
the ratio exp(log π - log π_old) as the loss forms it (log-ratio clamped to [-20, 20]), whether
PPO's clipped term was the smaller one (``clip_frac``'s definition), the token's advantage and
whether it was in the loss. Rows not chosen cost one set lookup per micro-batch row.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch

__all__ = ["TokenCapture"]


class TokenCapture:
    """Collects :attr:`rows` (step rows) once each; :attr:`got` maps a row to its arrays."""

    def __init__(self, rows: Iterable[int], clip_low: float, clip_high: float):
        self.rows = {int(r) for r in rows}
        self.clip_low, self.clip_high = float(clip_low), float(clip_high)
        self.got: dict[int, dict[str, np.ndarray]] = {}

    def take(
        self,
        step_rows: np.ndarray,
        response_mask: torch.Tensor,
        logp: torch.Tensor,
        old_logp: torch.Tensor,
        tok_adv: torch.Tensor,
        in_loss: torch.Tensor,
    ) -> None:
        """Keep the ``(B, R)`` tensors' values of the micro-batch rows whose step row is chosen
        and not yet kept."""
        pick = [
            b
            for b, r in enumerate(step_rows.tolist())
            if int(r) in self.rows and int(r) not in self.got
        ]
        if not pick:
            return
        with torch.no_grad():
            idx = torch.as_tensor(pick, device=logp.device)
            lp = logp.detach()[idx].float()
            old = old_logp.detach()[idx].float()
            adv = tok_adv.detach()[idx].float()
            ratio = torch.exp((lp - old).clamp(-20.0, 20.0))
            clipped = (
                torch.clamp(ratio, 1.0 - self.clip_low, 1.0 + self.clip_high) * adv < ratio * adv
            )
            arrays = {
                "learner_logprob": lp,
                "old_logprob": old,
                "advantage": adv,
                "ratio": ratio,
                "clipped": clipped & in_loss[idx],
                "in_loss": in_loss[idx],
            }
            cpu = {k: v.cpu().numpy() for k, v in arrays.items()}
            n = response_mask[idx].sum(dim=1).cpu().numpy()
        for j, b in enumerate(pick):
            m = int(n[j])
            self.got[int(step_rows[b])] = {k: v[j, :m] for k, v in cpu.items()}
