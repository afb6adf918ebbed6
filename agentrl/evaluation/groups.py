"""Statistics of one group of episodes, and the flat metric names they are exported under.

A group is an env's category, an env over all its categories (category :data:`ALL`), or every
episode (env and category :data:`ALL`). :func:`metric_key` / :func:`parse_metric_key` name a
group's statistic in ``metrics.jsonl`` and TensorBoard (``eval/<env>/<category>/<stat>``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from .records import EpisodeRecord
from .stats import mean_interval, wilson_interval

__all__ = ["ALL", "STATS", "GroupStats", "ReportView", "metric_key", "parse_metric_key"]

#: Category (and env) name of the aggregate rows.
ALL = "all"
#: The per-group statistics exported by :meth:`Report.metrics`.
STATS = (
    "episodes",
    "success_rate",
    "success_ci_low",
    "success_ci_high",
    "mean_score",
    "mean_steps",
    "mean_return",
    "invalid_action_rate",
    "truncations",
    "errors",
)


@dataclass(frozen=True)
class GroupStats:
    """Statistics of one group of episodes (an env's category, an env, or everything).

    ``success_rate`` and its Wilson interval ``success_ci_low``/``success_ci_high`` are fractions
    in [0, 1]; ``mean_score`` is the mean final ``info["score"]`` (in [0, 1]) and
    ``score_ci_low``/``score_ci_high`` its interval (:func:`~.stats.mean_interval`);
    ``invalid_action_rate`` is invalid actions over all actions of the group (step-weighted; 0
    when the group took no step); ``truncations`` counts episodes that ended without terminating
    (step cap or cut), ``errors`` those cut by a failure.
    """

    env: str
    category: str
    episodes: int
    successes: int
    success_rate: float
    success_ci_low: float
    success_ci_high: float
    mean_score: float
    score_ci_low: float
    score_ci_high: float
    mean_steps: float
    mean_return: float
    steps: int
    invalid_actions: int
    invalid_action_rate: float
    truncations: int
    errors: int

    @classmethod
    def of(
        cls, env: str, category: str, records: Sequence[EpisodeRecord], confidence: float = 0.95
    ) -> GroupStats:
        n = len(records)
        if n == 0:
            raise ValueError(f"no episodes for env {env!r}, category {category!r}")
        wins = sum(r.won for r in records)
        steps = sum(r.steps for r in records)
        invalid = sum(r.invalid_actions for r in records)
        low, high = wilson_interval(wins, n, confidence)
        score = math.fsum(r.score for r in records) / n
        score_low, score_high = mean_interval(min(1.0, max(0.0, score)), n, confidence)
        return cls(
            env=env,
            category=category,
            episodes=n,
            successes=wins,
            success_rate=wins / n,
            success_ci_low=low,
            success_ci_high=high,
            mean_score=score,
            score_ci_low=score_low,
            score_ci_high=score_high,
            mean_steps=steps / n,
            mean_return=math.fsum(r.total_reward for r in records) / n,
            steps=steps,
            invalid_actions=invalid,
            invalid_action_rate=invalid / steps if steps else 0.0,
            truncations=sum(r.truncated for r in records),
            errors=sum(r.error is not None for r in records),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class ReportView(Protocol):
    """What the views (``render.py``, ``charts.py``) read of a report. :class:`~.report.Report`
    has it; the views depend on this, not on ``report.py``, which imports them."""

    @property
    def meta(self) -> dict[str, Any]: ...

    @property
    def confidence(self) -> float: ...

    @property
    def envs(self) -> list[str]: ...

    def categories(self, env: str) -> list[str]: ...

    def get(self, env: str, category: str = ALL) -> GroupStats: ...

    def rows(self) -> list[GroupStats]: ...


_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]+")


def _safe(name: str) -> str:
    return _UNSAFE.sub("_", name) or "_"


def metric_key(prefix: str, env: str | None, category: str | None, stat: str) -> str:
    """``eval/Sokoban-v0/6x6-1box/success_rate`` (or ``eval/success_rate`` for the overall
    group). Characters other than letters, digits, ``_.-`` in env and category become ``_``."""
    parts = [prefix] if prefix else []
    if env is not None:
        parts += [_safe(env), _safe(category if category is not None else ALL)]
    return "/".join(parts + [stat])


def parse_metric_key(key: str, prefix: str = "eval") -> tuple[str, str, str] | None:
    """Inverse of :func:`metric_key`: ``(env, category, stat)``, with ``("all", "all", stat)``
    for the overall group; ``None`` when ``key`` is not an evaluation metric."""
    parts = key.split("/")
    if prefix:
        if not parts or parts[0] != prefix:
            return None
        parts = parts[1:]
    if len(parts) == 1 and parts[0] in STATS:
        return ALL, ALL, parts[0]
    if len(parts) == 3 and parts[2] in STATS:
        return parts[0], parts[1], parts[2]
    return None
