"""Counting env errors: the metrics a run logs about them and the error-rate limit.

Pure functions over counts (episodes cut, by :data:`agentrl.pool.checks.ERROR_KINDS` kind), so
training, evaluation and tests share one definition of "broken rather than flaky".
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["error_metrics", "error_rate_stop"]


def error_metrics(
    errors: Mapping[str, int], restarts: int = 0, replayed: int = 0
) -> dict[str, float]:
    """``env/errors`` (episodes cut by env faults), ``env/errors/<kind>``, and the pool's worker
    restarts and replayed episodes; empty when nothing happened (a healthy run logs no new keys)."""
    out: dict[str, float] = {}
    total = sum(errors.values())
    if total:
        out["env/errors"] = float(total)
        out.update({f"env/errors/{k}": float(v) for k, v in sorted(errors.items()) if v})
    if restarts:
        out["env/worker_restarts"] = float(restarts)
    if replayed:
        out["env/replayed_episodes"] = float(replayed)
    return out


def error_rate_stop(
    errors: Mapping[str, int],
    episodes: int,
    max_rate: float,
    env_id: str,
    example: str | None = None,
) -> str | None:
    """Why to stop (one line) when more than ``max_rate`` of ``episodes`` ended in env errors.

    ``example``: one of the errors, quoted so the line says what is wrong.
    """
    total = sum(errors.values())
    if episodes <= 0 or total / episodes <= max_rate:
        return None
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(errors.items(), key=lambda kv: -kv[1]) if v)
    line = (
        f"env {env_id} looks broken, not flaky: {total} of {episodes} episodes ended in env errors "
        f"({kinds}), over env.max_error_rate={max_rate:g}"
    )
    if example:
        line += f"; e.g. {example.strip().splitlines()[0]}"
    return line
