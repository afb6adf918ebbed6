"""Scene inventories and object rules shipped with the ``alfworld`` package.

Everything here is read from the installed package (no copy is vendored):

- ``alfworld/gen/layouts/FloorPlan<N>-objects.json``: the object and receptacle types present in
  each of the ~120 AI2-THOR scenes;
- ``FloorPlan<N>-openable.json``: receptacle instances (THOR ids such as
  ``Cabinet|+00.68|+00.50|-02.20``) with the pose the agent stands at to use them;
- ``FloorPlan<N>-layout.npy``: the scene's navigable floor points (metres);
- ``alfworld/gen/constants.py``: which object types each receptacle type may hold
  (``VAL_RECEPTACLE_OBJECTS``), object affordances (``VAL_ACTION_OBJECTS``), scene numbers of
  each room type and the train/test scene split, the task types valid per room type.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Rules", "Scene", "load_rules", "load_scenes"]

#: Lamps are not in VAL_RECEPTACLE_OBJECTS (THOR has them stand on furniture or on the floor);
#: the PDDL goal of "look at X in light" needs the lamp in a receptacle, so the generator puts
#: lamps on one of these.
LAMP_HOLDERS = ("SideTable", "Desk", "Dresser", "Shelf", "CoffeeTable", "DiningTable", "TVStand")
#: Static receptacles a scene lists without instances in its openable.json get this many.
DEFAULT_INSTANCES = {"StoveBurner": 4}


@dataclass(frozen=True)
class Scene:
    """One AI2-THOR floor plan as the package describes it."""

    number: int
    room: str  # Kitchen, LivingRoom, Bedroom, Bathroom
    types: frozenset[str]  # object and receptacle types present
    receptacles: tuple[tuple[str, str, tuple[float, float, int, int]], ...]  # (id, type, pose)
    points: np.ndarray  # navigable floor points, shape (n, 2)

    @property
    def floor_plan(self) -> str:
        return f"FloorPlan{self.number}"


@dataclass(frozen=True)
class Rules:
    """Object rules from ``alfworld.gen.constants``."""

    holds: dict[str, frozenset[str]]  # static receptacle type -> object types it may hold
    pickupable: frozenset[str]
    movable_receptacles: frozenset[str]  # objects that are receptacles in THOR (Mug, Bowl...)
    affordances: dict[str, frozenset[str]]  # Heatable/Coolable/Cleanable/Toggleable/Sliceable
    openable: frozenset[str]
    object_types: tuple[str, ...]  # every otype constant declared in a problem
    receptacle_types: tuple[str, ...]  # every rtype constant declared in a problem
    room_scenes: dict[str, tuple[int, ...]]
    test_scenes: frozenset[int]
    goal_rooms: dict[str, frozenset[str]]


def _package_dir() -> Path:
    try:
        import alfworld.gen
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("the ALFWorld generator needs pip install 'agentrl[alfworld]'") from exc
    return Path(alfworld.gen.__file__).parent


def load_rules() -> Rules:
    """Read the object rules from the installed ``alfworld.gen.constants``."""
    import alfworld.gen.constants as c

    movable = frozenset(c.MOVABLE_RECEPTACLES)
    holds = {
        r: frozenset(o for o in objs if not o.endswith("Sliced"))
        for r, objs in c.VAL_RECEPTACLE_OBJECTS.items()
        if r not in movable
    }
    pickupable = frozenset().union(*holds.values())
    static = sorted(set(c.RECEPTACLES) - movable)
    otypes = sorted((set(c.OBJECTS) - set(static)) | pickupable)
    return Rules(
        holds=holds,
        pickupable=pickupable,
        movable_receptacles=movable,
        affordances={k: frozenset(v) for k, v in c.VAL_ACTION_OBJECTS.items()},
        openable=frozenset(c.OPENABLE_CLASS_LIST),
        object_types=tuple(otypes),
        receptacle_types=tuple(static),
        room_scenes={room: tuple(r) for room, r in c.SCENE_TYPE.items()},
        test_scenes=frozenset(c.TEST_SCENE_NUMBERS),
        goal_rooms={g: frozenset(rooms) for g, rooms in c.GOALS_VALID.items()},
    )


def _receptacle_type(thor_id: str) -> str:
    parts = thor_id.split("|")
    return parts[-1] if len(parts) == 5 else parts[0]  # Sink|x|y|z|SinkBasin -> SinkBasin


def load_scenes(rules: Rules | None = None) -> dict[int, Scene]:
    """Every scene of the package's layouts, by scene number (sorted)."""
    rules = rules or load_rules()
    layouts = _package_dir() / "layouts"
    room_of = {n: room for room, nums in rules.room_scenes.items() for n in nums}
    scenes: dict[int, Scene] = {}
    for objects_file in sorted(layouts.glob("FloorPlan*-objects.json")):
        number = int(objects_file.name[len("FloorPlan") : -len("-objects.json")])
        if number not in room_of:
            continue
        types: list[Any] = json.loads(objects_file.read_text())
        openable = json.loads((layouts / f"FloorPlan{number}-openable.json").read_text())
        points = np.load(layouts / f"FloorPlan{number}-layout.npy")
        recs = tuple(
            (rid, _receptacle_type(rid), (float(p[0]), float(p[1]), int(p[2]), int(p[3])))
            for rid, p in sorted(openable.items())
            if _receptacle_type(rid) in rules.holds
        )
        scenes[number] = Scene(
            number, room_of[number], frozenset(types), recs, np.asarray(points, dtype=float)
        )
    return scenes
