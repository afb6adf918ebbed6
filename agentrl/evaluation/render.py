"""The report as a table: plain text, Markdown, or a ``rich`` table.

All three are built from :func:`cells`, so they show the same numbers with the same rounding:
success and its Wilson interval in percent (one decimal), mean score ×100 (one decimal, as
papers report WebShop's score) and, when some group's score differs from its success rate (a
graded score such as WebShop's or Search-v0's F1), the score's interval; mean steps (one decimal),
invalid-action rate in percent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .groups import GroupStats, ReportView

__all__ = ["HEADERS", "cells", "print_report", "table"]

HEADERS = (
    "env",
    "category",
    "episodes",
    "success %",
    "95% CI",
    "score",
    "score CI",
    "steps",
    "invalid %",
    "truncated",
    "errors",
)


def cells(g: GroupStats) -> list[str]:
    """One table row of strings for a group."""
    return [
        g.env,
        g.category,
        str(g.episodes),
        f"{100 * g.success_rate:.1f}",
        f"{100 * g.success_ci_low:.1f}–{100 * g.success_ci_high:.1f}",
        f"{100 * g.mean_score:.1f}",
        f"{100 * g.score_ci_low:.1f}–{100 * g.score_ci_high:.1f}",
        f"{g.mean_steps:.1f}",
        f"{100 * g.invalid_action_rate:.1f}",
        str(g.truncations),
        str(g.errors),
    ]


def _headers_and_rows(report: ReportView) -> tuple[list[str], list[list[str]]]:
    """The confidence column is named after the report's level; ``score CI`` only when a score is
    graded (differs from success somewhere); ``errors`` only when any."""
    headers = list(HEADERS)
    headers[4] = f"{100 * report.confidence:g}% CI"
    rows = [cells(g) for g in report.rows()]
    keep = [True] * len(headers)
    keep[HEADERS.index("score CI")] = any(g.mean_score != g.success_rate for g in report.rows())
    keep[HEADERS.index("errors")] = any(g.errors for g in report.rows())
    headers = [h for h, k in zip(headers, keep) if k]
    rows = [[c for c, k in zip(r, keep) if k] for r in rows]
    return headers, rows


def _plain(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(values: list[str]) -> str:
        out = [v.ljust(w) if i < 2 else v.rjust(w) for i, (v, w) in enumerate(zip(values, widths))]
        return "  ".join(out).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in rows)]) + "\n"


def _markdown(headers: list[str], rows: list[list[str]]) -> str:
    align = ["---" if i < 2 else "---:" for i in range(len(headers))]
    lines = [headers, align, *rows]
    return "\n".join("| " + " | ".join(r) + " |" for r in lines) + "\n"


def _rich(headers: list[str], rows: list[list[str]], title: str | None) -> Any:
    from rich.table import Table

    tab = Table(title=title)
    for i, h in enumerate(headers):
        tab.add_column(h, justify="left" if i < 2 else "right", no_wrap=True)
    for k, r in enumerate(rows):
        last_of_env = k + 1 < len(rows) and rows[k + 1][0] != r[0]
        tab.add_row(*r, end_section=last_of_env)
    return tab


def table(report: ReportView, kind: str = "plain") -> Any:
    """``kind``: ``"plain"`` (aligned text), ``"markdown"``, or ``"rich"`` (a ``rich`` Table)."""
    headers, rows = _headers_and_rows(report)
    if kind == "plain":
        return _plain(headers, rows)
    if kind == "markdown":
        return _markdown(headers, rows)
    if kind == "rich":
        return _rich(headers, rows, report.meta.get("title"))
    raise ValueError(f"table kind must be 'plain', 'markdown' or 'rich', got {kind!r}")


def _needed_width(report: ReportView) -> int:
    plain_width = max(len(line) for line in table(report, "plain").splitlines())
    return plain_width + 3 * len(_headers_and_rows(report)[0]) + 1


def print_report(report: ReportView, console: Any = None) -> None:
    """Print with rich when it is installed (it is in the ``train`` extra), else plain text.

    A console narrower than the table (80 columns when output is not a terminal) is widened for
    this table, writing to the same file, so no number is ever cut to ``1…``.
    """
    try:
        from rich.console import Console
    except ImportError:
        print(table(report, "plain"), end="")
        return
    need = _needed_width(report)
    if console is None:
        console = Console(width=max(Console().width, need))
    elif console.width < need:
        console = Console(
            file=console.file,
            width=need,
            force_terminal=console.is_terminal,
            color_system=console.color_system,
            record=console.record,
        )
    console.print(table(report, "rich"))
