"""Command-line checks shared by ``agentrl.train`` and ``agentrl.evaluate`` before Hydra runs.

Hydra answers an unknown group option (``env=sokobn``) with a multi-line listing; this check
answers first, in one line with a suggestion: ``unknown env=sokobn; did you mean sokoban?
(options: alfworld, frozenlake, ...)``. Only the packaged groups are known: an option from a
user's ``hydra.searchpath`` folder is left to Hydra.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from importlib import resources

__all__ = ["group_options", "unknown_group_option"]


def group_options() -> dict[str, list[str]]:
    """Every packaged config group and its options (``configs/<group>/<option>.yaml``)."""
    root = resources.files("agentrl.configs")
    groups = {}
    for folder in root.iterdir():
        if folder.is_dir() and not folder.name.startswith(("_", ".")):
            names = [p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml")]
            groups[folder.name] = sorted(n for n in names if not n.endswith("_schema"))
    return groups


def unknown_group_option(argv: Sequence[str]) -> str | None:
    """The first ``group=option`` argument naming an option that does not exist, as one line."""
    if any(a.startswith("hydra.searchpath") for a in argv):
        return None  # the user's own config folders may add options
    groups = group_options()
    for arg in argv:
        key, sep, value = arg.lstrip("+~").partition("=")
        if not sep or key not in groups or value in groups[key] or value in ("null", ""):
            continue
        close = difflib.get_close_matches(value, groups[key], n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]}?" if close else ""
        return f"unknown {key}={value}{hint} (options: {', '.join(groups[key])})"
    return None
