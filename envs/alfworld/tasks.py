"""ALFWorld task types, their short names, and the task-type filter.

The six task types and their numbering follow the ``alfworld`` package (``TASK_TYPES`` in
``alfworld/agents/environment/alfred_tw_env.py``); the short names are the column names of the
ALFWorld paper's result tables (Pick, Look, Clean, Heat, Cool, Pick2).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["SHORT_NAMES", "SPLITS", "TASK_TYPES", "parse_task_types"]

#: Task-type number (as in the alfworld package and its configs) -> task-type name.
TASK_TYPES: dict[int, str] = {
    1: "pick_and_place_simple",
    2: "look_at_obj_in_light",
    3: "pick_clean_then_place_in_recep",
    4: "pick_heat_then_place_in_recep",
    5: "pick_cool_then_place_in_recep",
    6: "pick_two_obj_and_place",
}

#: Task-type name -> the paper's short column name.
SHORT_NAMES: dict[str, str] = {
    "pick_and_place_simple": "Pick",
    "look_at_obj_in_light": "Look",
    "pick_clean_then_place_in_recep": "Clean",
    "pick_heat_then_place_in_recep": "Heat",
    "pick_cool_then_place_in_recep": "Cool",
    "pick_two_obj_and_place": "Pick2",
}

#: The official splits: training games, in-distribution and out-of-distribution validation.
SPLITS: tuple[str, ...] = ("train", "valid_seen", "valid_unseen")


def parse_task_types(task_types: Iterable[int | str] | None) -> tuple[str, ...]:
    """Normalise a task-type filter to task-type names, in the canonical order.

    Accepts numbers (1..6, as in alfworld's ``env.task_types`` config), full names or short
    names (``"Heat"``, case-insensitive). ``None`` means all six.
    """
    if task_types is None:
        return tuple(TASK_TYPES.values())
    if isinstance(task_types, (str, int)):
        task_types = [task_types]
    by_short = {v.lower(): k for k, v in SHORT_NAMES.items()}
    chosen = set()
    for t in task_types:
        if isinstance(t, int) and not isinstance(t, bool) and t in TASK_TYPES:
            chosen.add(TASK_TYPES[t])
        elif isinstance(t, str) and t in SHORT_NAMES:
            chosen.add(t)
        elif isinstance(t, str) and t.lower() in by_short:
            chosen.add(by_short[t.lower()])
        elif isinstance(t, str) and t.isdigit() and int(t) in TASK_TYPES:
            chosen.add(TASK_TYPES[int(t)])
        else:
            raise ValueError(
                f"unknown ALFWorld task type {t!r}; use 1-6, one of {list(TASK_TYPES.values())} "
                f"or a short name {list(SHORT_NAMES.values())}"
            )
    if not chosen:
        raise ValueError("the task-type filter is empty")
    return tuple(t for t in TASK_TYPES.values() if t in chosen)
