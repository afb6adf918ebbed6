"""The official ALFRED / ALFWorld splits: scenes, task specs and game counts of each split.

Sources (facts, cited; nothing here is downloaded at run time):

- ``alfred_tasks.tsv`` (next to this file) is derived from ALFRED's split file
  ``data/splits/oct21.json`` (github.com/askforalfred/alfred): for ``train``, ``valid_seen`` and
  ``valid_unseen``, every task (type, object, target receptacle or lamp, scene) of ALFWorld's six
  task types with its number of ALFRED trials (``scripts/alfred_task_table.py`` rebuilds it).
  From it: ALFRED trains on 108 scenes; ``valid_seen`` uses 85 of those (88 counting the
  movable-receptacle and sliced tasks ALFWorld leaves out); ``valid_unseen`` uses
  four scenes never in ``train`` (FloorPlan10, 219, 308, 424, one per room type); the eight
  test-unseen scenes (9, 29, 215, 226, 315, 325, 404, 425) are in none of the three.
  (alfworld's own ``gen/constants.py`` has a different, older ``TEST_SCENE_NUMBERS`` list for its
  data-generation scripts; it is not the split of the released games.)
- ALFWorld's released games (``alfworld-download``, json_2.1.1) are those trials minus the ones
  ALFWorld's generation could not solve: 3,553 ``train``, 140 ``valid_seen``, 134
  ``valid_unseen`` games (alfworld's ``data/README.md``). Per task type, :data:`OFFICIAL_COUNTS`:
  ``valid_unseen`` (24/18/31/23/21/17) as public evaluation manifests list it; ``valid_seen`` and
  ``train`` as the ALFWorld paper's appendix reports them (each count is at most the number of
  eligible ALFRED trials of that type, and they sum to the released totals).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from .tasks import SHORT_NAMES, SPLITS

__all__ = [
    "OFFICIAL_COUNTS",
    "TEST_UNSEEN_SCENES",
    "TaskSpec",
    "official_counts",
    "split_scenes",
    "task_specs",
]

TABLE = Path(__file__).with_name("alfred_tasks.tsv")

#: ALFRED's test-unseen scenes: no ALFWorld split uses them.
TEST_UNSEEN_SCENES: frozenset[int] = frozenset({9, 29, 215, 226, 315, 325, 404, 425})

#: Games per task type in ALFWorld's released splits (json_2.1.1); see the module docstring.
OFFICIAL_COUNTS: dict[str, dict[str, int]] = {
    "train": {
        "pick_and_place_simple": 790,
        "look_at_obj_in_light": 308,
        "pick_clean_then_place_in_recep": 650,
        "pick_heat_then_place_in_recep": 459,
        "pick_cool_then_place_in_recep": 533,
        "pick_two_obj_and_place": 813,
    },
    "valid_seen": {
        "pick_and_place_simple": 35,
        "look_at_obj_in_light": 13,
        "pick_clean_then_place_in_recep": 27,
        "pick_heat_then_place_in_recep": 16,
        "pick_cool_then_place_in_recep": 25,
        "pick_two_obj_and_place": 24,
    },
    "valid_unseen": {
        "pick_and_place_simple": 24,
        "look_at_obj_in_light": 18,
        "pick_clean_then_place_in_recep": 31,
        "pick_heat_then_place_in_recep": 23,
        "pick_cool_then_place_in_recep": 21,
        "pick_two_obj_and_place": 17,
    },
}


@dataclass(frozen=True)
class TaskSpec:
    """One ALFRED task: what to do, where, and how many ALFRED trials it has in its split."""

    task_type: str
    obj: str  # object type ("Apple")
    target: str  # receptacle type, or the lamp type for look tasks
    scene: int
    trials: int


@cache
def _table() -> dict[str, dict[str, tuple[TaskSpec, ...]]]:
    long = {v: k for k, v in SHORT_NAMES.items()}
    out: dict[str, dict[str, list[TaskSpec]]] = {s: defaultdict(list) for s in SPLITS}
    for n, line in enumerate(TABLE.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            split, short, obj, target, scene, trials = line.split("\t")
            spec = TaskSpec(long[short], obj, target, int(scene), int(trials))
            out[split][spec.task_type].append(spec)
        except (ValueError, KeyError) as exc:
            raise ValueError(f"{TABLE}:{n}: malformed task line {line!r} ({exc})") from None
    return {s: {t: tuple(v) for t, v in by.items()} for s, by in out.items()}


def task_specs(split: str, task_type: str) -> tuple[TaskSpec, ...]:
    """ALFRED's tasks of ``task_type`` in ``split`` (with their trial counts)."""
    if split not in SPLITS:
        raise ValueError(f"unknown ALFWorld split {split!r}; expected one of {SPLITS}")
    return _table()[split].get(task_type, ())


def split_scenes(split: str) -> frozenset[int]:
    """The scene numbers ALFRED uses in ``split``."""
    if split not in SPLITS:
        raise ValueError(f"unknown ALFWorld split {split!r}; expected one of {SPLITS}")
    return frozenset(s.scene for specs in _table()[split].values() for s in specs)


def official_counts(split: str) -> dict[str, int]:
    """Games per task type of the released ALFWorld ``split``."""
    if split not in SPLITS:
        raise ValueError(f"unknown ALFWorld split {split!r}; expected one of {SPLITS}")
    return dict(OFFICIAL_COUNTS[split])
