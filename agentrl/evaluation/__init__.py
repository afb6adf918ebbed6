"""Evaluation: episode records -> per-env, per-category statistics, tables, JSON and charts.

The statistics and report code is pure Python (no torch); ``rich`` and ``matplotlib`` are
imported only by the table and chart functions.

    from agentrl.evaluation import EpisodeRecord, summarize
    report = summarize(records, meta={"agent": "random"})
    report.to_json("results.json"); report.print(); report.plot("success.png")
    metrics = report.metrics(prefix="eval")   # flat scalars for metrics.jsonl / TensorBoard

The evaluation loop (agents, episode runner) lives in :mod:`agentrl.evaluation.runner` and
:mod:`agentrl.evaluation.agents`; the CLI is ``python -m agentrl.evaluate``.
"""

from .groups import ALL, STATS, GroupStats, metric_key, parse_metric_key
from .records import EpisodeRecord, record_from_rollout
from .report import Report, summarize
from .stats import wilson_interval

__all__ = [
    "ALL",
    "STATS",
    "EpisodeRecord",
    "GroupStats",
    "Report",
    "metric_key",
    "parse_metric_key",
    "record_from_rollout",
    "summarize",
    "wilson_interval",
]
