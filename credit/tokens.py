"""Put each step's advantage on exactly that step's response tokens.

``token_step`` says, for every token position of the learner's batch, which step row's response
the token belongs to, or -1 (prompt, observation, padding). The result carries the step's
advantage on its response tokens and 0 everywhere else, whatever the layout: one sequence per
step, or a whole dialogue with several responses in one sequence.
"""

from __future__ import annotations

import numpy as np

__all__ = ["response_token_step", "step_to_tokens"]


def step_to_tokens(step_advantages: np.ndarray, token_step: np.ndarray) -> np.ndarray:
    """Token-level advantages (float32, shape of ``token_step``) from per-step advantages."""
    adv = np.asarray(step_advantages, dtype=np.float32)
    idx = np.asarray(token_step)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"token_step must hold integers, got {idx.dtype}")
    if idx.size and (idx.max() >= len(adv) or idx.min() < -1):
        raise IndexError(f"token_step refers to steps outside 0..{len(adv) - 1} (and -1 for none)")
    return np.where(idx >= 0, adv[np.maximum(idx, 0)], np.float32(0.0)).astype(np.float32)


def response_token_step(
    step_rows: np.ndarray, prompt_lengths: np.ndarray, total_lengths: np.ndarray, width: int
) -> np.ndarray:
    """``token_step`` for the one-sequence-per-step layout, right-padded to ``width``.

    Row k of the result is sequence k = prompt tokens then response tokens of step
    ``step_rows[k]``; positions ``prompt_lengths[k] .. total_lengths[k]-1`` are its response.
    """
    pos = np.arange(width)[None, :]
    p = np.asarray(prompt_lengths)[:, None]
    e = np.asarray(total_lengths)[:, None]
    return np.where((pos >= p) & (pos < e), np.asarray(step_rows)[:, None], -1)
