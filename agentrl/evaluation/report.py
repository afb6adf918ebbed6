"""Aggregate episode records into per-env, per-category statistics: the evaluation report.

``summarize(records) -> Report``. A report holds one :class:`GroupStats` per (env, category),
one per env over all its categories (category ``"all"``) and one over everything
(``report.overall``), plus the records themselves and free-form ``meta`` (agent, split, seeds…).
It writes itself as JSON (``to_json``), a table (``table``/``print``), a bar chart (``plot``) and
flat scalars for ``metrics.jsonl``/TensorBoard (``metrics``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .charts import plot_bars
from .groups import ALL, STATS, GroupStats, metric_key, parse_metric_key
from .records import EpisodeRecord
from .render import print_report, table

__all__ = [
    "ALL",
    "FORMAT",
    "STATS",
    "GroupStats",
    "Report",
    "metric_key",
    "parse_metric_key",
    "summarize",
]

#: Identifies the JSON layout written by :meth:`Report.to_dict`.
FORMAT = "agentrl.evaluation.report/1"


def _natural_key(text: str) -> list[Any]:
    """Sort key that orders ``"6x6"`` before ``"10x10"``."""
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", text)]


def _order(names: Iterable[str], preferred: Sequence[str] | None) -> list[str]:
    names = set(names)
    first = [c for c in (preferred or ()) if c in names]
    return first + sorted(names - set(first), key=_natural_key)


@dataclass(frozen=True)
class Report:
    """An evaluation report; build it with :func:`summarize`."""

    groups: tuple[GroupStats, ...]
    overall: GroupStats
    records: tuple[EpisodeRecord, ...]
    meta: dict[str, Any] = field(default_factory=dict)
    confidence: float = 0.95

    # -- lookup --------------------------------------------------------------------------------
    @property
    def envs(self) -> list[str]:
        return list(dict.fromkeys(g.env for g in self.groups))

    def categories(self, env: str) -> list[str]:
        """The categories of ``env`` in report order, without the ``"all"`` row."""
        return [g.category for g in self.groups if g.env == env and g.category != ALL]

    def get(self, env: str, category: str = ALL) -> GroupStats:
        if env == ALL and category == ALL:
            return self.overall
        for g in self.groups:
            if g.env == env and g.category == category:
                return g
        raise KeyError(f"no group for env {env!r}, category {category!r}")

    def rows(self) -> list[GroupStats]:
        """Table rows: each env's categories then its ``all`` row, then the overall row when
        there is more than one env."""
        return list(self.groups) + ([self.overall] if len(self.envs) > 1 else [])

    # -- JSON ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "meta": self.meta,
            "confidence": self.confidence,
            "groups": [g.to_dict() for g in self.groups],
            "overall": self.overall.to_dict(),
            "episodes": [r.to_dict() for r in self.records],
        }

    def to_json(self, path: str | Path | None = None, indent: int = 1) -> str:
        """The report as JSON text (keys in a fixed order); also written to ``path`` if given."""
        text = json.dumps(self.to_dict(), indent=indent, allow_nan=False) + "\n"
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text)
        return text

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Report:
        """Rebuild a report from :meth:`to_dict` output, re-deriving (and checking) the stats."""
        if data.get("format") != FORMAT:
            raise ValueError(
                f"not an agentrl evaluation report (format {data.get('format')!r}, expected {FORMAT!r})"
            )
        records = [EpisodeRecord.from_dict(r) for r in data["episodes"]]
        order = {}
        for g in data.get("groups", []):
            order.setdefault(g["env"], []).append(g["category"])
        report = summarize(
            records,
            meta=data.get("meta") or {},
            confidence=data.get("confidence", 0.95),
            category_order={e: [c for c in cs if c != ALL] for e, cs in order.items()},
        )
        stored = [dict(g) for g in data.get("groups", [])]
        # the stored fields only: a report written before a field was added still loads
        derived = [{k: g.to_dict().get(k) for k in s} for s, g in zip(stored, report.groups)]
        if stored and (len(stored) != len(report.groups) or stored != derived):
            raise ValueError("report groups do not match its episodes (file edited or corrupted)")
        return report

    @classmethod
    def from_json(cls, path: str | Path) -> Report:
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON ({exc})") from exc
        return cls.from_dict(data)

    # -- flat metrics (metrics.jsonl, TensorBoard) ---------------------------------------------
    def metrics(self, prefix: str = "eval") -> dict[str, float]:
        """Flat scalars: ``{prefix}/{env}/{category}/{stat}`` for every group (category
        ``all`` for an env's total) and ``{prefix}/{stat}`` for the overall group.

        ``stat`` is one of :data:`STATS`. Names are sanitised by :func:`metric_key`.
        """
        out: dict[str, float] = {}
        for stat in STATS:
            out[metric_key(prefix, None, None, stat)] = float(getattr(self.overall, stat))
        for g in self.groups:
            for stat in STATS:
                out[metric_key(prefix, g.env, g.category, stat)] = float(getattr(g, stat))
        return out

    # -- views (render.py, charts.py: they read a report, and never import this module) --------
    def table(self, kind: str = "plain") -> Any:
        """The table: ``"plain"`` or ``"markdown"`` text, or a ``rich.table.Table`` (``"rich"``)."""
        return table(self, kind)

    def print(self, console: Any = None) -> None:
        """Print the table (rich when installed, plain text otherwise)."""
        print_report(self, console)

    def plot(self, path: str | Path, title: str | None = None) -> Any:
        """Draw the success-rate bar chart with Wilson intervals to ``path`` (PNG); returns the
        matplotlib figure."""
        return plot_bars([self], path, title=title)


def summarize(
    records: Iterable[EpisodeRecord | Mapping[str, Any]],
    meta: Mapping[str, Any] | None = None,
    confidence: float = 0.95,
    category_order: Mapping[str, Sequence[str]] | None = None,
) -> Report:
    """Aggregate episode records (or their dicts) into a :class:`Report`.

    Envs keep their first-seen order; categories are sorted naturally (``6x6`` before
    ``10x10``) unless ``category_order[env]`` lists some first. Raises ``ValueError`` on an
    empty input: a report over nothing is a configuration error, not 0 %.
    """
    recs = tuple(r if isinstance(r, EpisodeRecord) else EpisodeRecord.from_dict(r) for r in records)
    if not recs:
        raise ValueError("cannot summarize zero episodes")
    by_env: dict[str, list[EpisodeRecord]] = {}
    for r in recs:
        by_env.setdefault(r.env, []).append(r)
    groups: list[GroupStats] = []
    for env, env_recs in by_env.items():
        by_cat: dict[str, list[EpisodeRecord]] = {}
        for r in env_recs:
            by_cat.setdefault(r.category, []).append(r)
        for cat in _order(by_cat, (category_order or {}).get(env)):
            groups.append(GroupStats.of(env, cat, by_cat[cat], confidence))
        groups.append(GroupStats.of(env, ALL, env_recs, confidence))
    overall = GroupStats.of(ALL, ALL, recs, confidence)
    return Report(tuple(groups), overall, recs, dict(meta or {}), confidence)
