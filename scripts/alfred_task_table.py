"""Rebuild ``envs/alfworld/alfred_tasks.tsv`` from ALFRED's split file.

    python scripts/alfred_task_table.py PATH/TO/alfred/data/splits/oct21.json

``oct21.json`` (github.com/askforalfred/alfred, MIT licence) lists every ALFRED trial of each split
as ``<task_type>-<Object>-<MovableRecep>-<Target>-<scene>/<trial>``. ALFWorld's games are the
trials of ``train``, ``valid_seen`` and ``valid_unseen`` without movable-receptacle or sliced
tasks (``AlfredTWEnv.collect_game_files`` skips those), minus the ones its generation found
unsolvable. The table keeps, per split, each task (type, object, target, scene) with its number
of trials; the generator draws official task specs from it (see ``splits.py``).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "envs" / "alfworld" / "alfred_tasks.tsv"
SPLITS = ("train", "valid_seen", "valid_unseen")
SHORT = {
    "pick_and_place_simple": "Pick",
    "look_at_obj_in_light": "Look",
    "pick_clean_then_place_in_recep": "Clean",
    "pick_heat_then_place_in_recep": "Heat",
    "pick_cool_then_place_in_recep": "Cool",
    "pick_two_obj_and_place": "Pick2",
}


def main(path: str) -> None:
    data = json.loads(Path(path).read_text())
    lines = [
        "# ALFRED trials of ALFWorld's task types, per split: from askforalfred/alfred",
        "# data/splits/oct21.json (MIT licence); rebuilt by scripts/alfred_task_table.py.",
        "# split\ttask type (short name)\tobject\ttarget\tscene\ttrials",
    ]
    for split in SPLITS:
        dirs = Counter(
            e["task"].split("/")[0]
            for e in {e["task"]: e for e in data[split]}.values()
            if "movable" not in e["task"] and "Sliced" not in e["task"]
        )
        for task_dir, n in sorted(dirs.items()):
            task_type, obj, _mrecep, target, scene = task_dir.split("-")
            lines.append(f"{split}\t{SHORT[task_type]}\t{obj}\t{target}\t{scene}\t{n}")
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {len(lines) - 3} tasks to {OUT}")


if __name__ == "__main__":
    main(sys.argv[1])
