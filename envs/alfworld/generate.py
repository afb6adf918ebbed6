"""Offline ALFWorld game generator: games in the official layout, from what the package ships.

The official games (``alfworld-download``) need the internet. The ``alfworld`` package itself
ships everything needed to *make* games: the PDDL domain and text grammar, the object and
receptacle inventories of the AI2-THOR scenes, which object types each receptacle type may hold,
object affordances, and the PDDL goal and text templates of the six task types. This module
turns those into games::

    python -m agentrl.envs.alfworld.generate --out DIR --per-type N --seed S

writes ``DIR/json_2.1.1/{train,valid_seen,valid_unseen}/<task_type>-<Object>-None-<Target>-<scene>/
trial_agentrl_s<S>_<k>/{traj_data.json, initial_state.pddl, game.tw-pddl}`` for every task type,
exactly the layout ``alfworld-download`` produces, so any ALFWorld loader (ours, or alfworld's
``AlfredTWEnv``) reads them.

How a game is drawn (all choices from one seeded generator, so a seed fixes every game):

1. an ALFRED task of the split and task type (object, target receptacle or lamp, scene) from
   ``alfred_tasks.tsv`` (ALFRED's own split, see ``splits.py``), in proportion to its trials:
   ``valid_unseen`` games are only in ALFRED's four unseen rooms, which ``train`` never uses;
2. the scene's receptacles with the poses the agent uses them from (the package's
   ``FloorPlan<N>-openable.json``); receptacles with one pose share a location, as in the
   official games; static receptacle types the scene has but the file does not list get
   instances on random floor points;
3. 1-3 instances of every pickupable object type of the scene (2-4 of the target for Pick2),
   each in a random receptacle that may hold it, with alfworld's task filters (a target object
   never starts in a target receptacle, nor in the sink basin / microwave / fridge its
   Clean / Heat / Cool task uses); lamps on furniture; target objects in a fridge start cool
   (``isCool``), as alfworld's PDDL writer marks them;
4. the agent on a random floor point;
5. the PDDL goal and task text from alfworld's goal library, the grammar with the task text.

Each game is then loaded into the real engine and the full-knowledge expert's shortest plan
(``oracle.py``) replayed; every command must be admissible and the game must be won within
``max_plan_steps``. Only then is it written (with ``solvable: true`` and the plan as
``walkthrough``); otherwise it is redrawn.

Differences from the official data (docs/envs/alfworld.md lists them with statistics): thinner
receptacle inventories (only what the layout files list), uniform object placement rather than
THOR physics, objects located at their receptacle, no sliced or movable-receptacle tasks
(alfworld skips those too), goal-library task texts (as the official games unless human
annotations are switched on).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .engine import Engine, GameFileError
from .oracle import plan
from .scenes import DEFAULT_INSTANCES, LAMP_HOLDERS, Rules, Scene, load_rules, load_scenes
from .splits import TaskSpec, official_counts, task_specs
from .tasks import SPLITS, TASK_TYPES, parse_task_types
from .world import Task, facts_of, read_state, read_statics

__all__ = [
    "GENERATOR_VERSION",
    "GameSpec",
    "GenerationError",
    "Generator",
    "generate_games",
    "main",
    "trial_name",
]

#: Bump when a change alters the games drawn for a given seed (it keys the cache).
GENERATOR_VERSION = 2
JSON_DIR = "json_2.1.1"
LAMPS = ("DeskLamp", "FloorLamp")
#: A task's target receptacle may not be the appliance the task uses.
_EXCLUDED_TARGETS = {
    "pick_clean_then_place_in_recep": {"SinkBasin", "BathtubBasin"},
    "pick_heat_then_place_in_recep": {"Microwave"},
    "pick_cool_then_place_in_recep": {"Fridge"},
}
_NEEDS = {  # task type -> (affordance the object needs, receptacle type the task needs)
    "pick_clean_then_place_in_recep": ("Cleanable", "SinkBasin"),
    "pick_heat_then_place_in_recep": ("Heatable", "Microwave"),
    "pick_cool_then_place_in_recep": ("Coolable", "Fridge"),
}
#: Receptacle types a task's target objects may not start in (alfworld's task filters).
_APPLIANCE_START = {
    "pick_clean_then_place_in_recep": {"SinkBasin"},
    "pick_heat_then_place_in_recep": {"Microwave"},
    "pick_cool_then_place_in_recep": {"Fridge"},
}
_MAX_ATTEMPTS = 200


class GenerationError(RuntimeError):
    """No solvable game could be drawn (e.g. no scene fits the task type)."""


def trial_name(seed: int, index: int) -> str:
    """Directory name of generated game ``index`` (per split and task type) for ``seed``."""
    return f"trial_agentrl_s{seed}_{index:05d}"


def _mangle(thor_id: str) -> str:
    """THOR id -> PDDL name, ALFRED's way (``Apple|+01.59|...`` -> ``Apple_bar__plus_01_dot_59...``)."""
    for a, b in (
        ("|", "_bar_"),
        ("+", "_plus_"),
        ("-", "_minus_"),
        (".", "_dot_"),
        (",", "_comma_"),
    ):
        thor_id = thor_id.replace(a, b)
    return thor_id


def _coord(v: float) -> str:
    return f"{v:+06.2f}"


def _loc(x: float, z: float, rot: int, horizon: int) -> str:
    return _mangle(f"loc|{round(x / 0.25)}|{round(z / 0.25)}|{(rot // 90) % 4}|{horizon}")


@dataclass
class GameSpec:
    """One drawn game, before it is checked on the engine."""

    task_type: str
    scene: Scene
    params: dict[str, Any]
    goal_text: str
    problem: str
    seed_entropy: int
    objects: dict[str, str] = field(default_factory=dict)  # PDDL object name -> type

    @property
    def dir_name(self) -> str:
        p = self.params
        target = p["parent_target"] or p["toggle_target"]
        return f"{self.task_type}-{p['object_target']}-None-{target}-{self.scene.number}"


class Generator:
    """Draws and verifies games. Holds the package's rules and scenes and one engine."""

    def __init__(self, max_plan_steps: int = 30, engine: Engine | None = None):
        import alfworld.gen.goal_library as goal_library
        from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH

        self.max_plan_steps = int(max_plan_steps)
        self.rules: Rules = load_rules()
        self.scenes: dict[int, Scene] = load_scenes(self.rules)
        self.goals = goal_library.gdict
        self.domain = Path(ALFRED_PDDL_PATH).read_text()
        self.grammar = Path(ALFRED_TWL2_PATH).read_text()
        self._engine: Engine | None = engine
        self._own_engine = engine is None  # a borrowed engine (the env's) is not closed here

    # -- drawing -----------------------------------------------------------------------------
    def scene_pool(self, task_type: str, split: str) -> list[Scene]:
        """Scenes ALFRED uses for ``task_type`` in ``split`` (and the package has layouts for)."""
        numbers = {s.scene for s in task_specs(split, task_type)}
        return [self.scenes[n] for n in sorted(numbers) if n in self.scenes]

    def draw_spec(self, task_type: str, split: str, rng: np.random.Generator) -> TaskSpec:
        """One of ALFRED's tasks of ``task_type`` in ``split``, drawn in proportion to its trials."""
        specs = [s for s in task_specs(split, task_type) if s.scene in self.scenes]
        if not specs:
            raise GenerationError(f"ALFRED has no {task_type} task in {split} with a known scene")
        weights = np.array([s.trials for s in specs], dtype=float)
        return specs[int(rng.choice(len(specs), p=weights / weights.sum()))]

    def draw(
        self,
        task_type: str,
        scene: Scene,
        rng: np.random.Generator,
        spec: TaskSpec | None = None,
    ) -> GameSpec | None:
        """Draw one game of ``task_type`` in ``scene`` (None if the scene cannot host it).

        ``spec``: the ALFRED task (object and target types) to build; None draws them freely.
        """
        rules = self.rules
        recs = self._receptacles(scene, rng)
        by_type: dict[str, list[str]] = {}
        for rid, rtype, _ in recs:
            by_type.setdefault(rtype, []).append(rid)
        present = sorted(t for t in scene.types if t in rules.pickupable)
        if spec is not None and spec.obj in rules.pickupable and spec.obj not in present:
            present = sorted([*present, spec.obj])  # ALFRED spawned it in this scene
        holders = {o: sorted(r for r in by_type if o in rules.holds[r]) for o in present}
        present = [o for o in present if holders[o]]
        task = self._draw_task(task_type, present, holders, by_type, scene, rng, spec)
        if task is None:
            return None
        obj, parent, toggle = task
        # Where target objects may not start (alfworld's TaskGameState.get_filter_crit): not in
        # a target receptacle (the goal must not hold), nor in the appliance the task uses.
        banned = {parent} | _APPLIANCE_START.get(task_type, set())

        # Objects: PDDL name -> (type, receptacle id). Target type first, then the others.
        placed: dict[str, tuple[str, str]] = {}
        used_ids: set[str] = set()
        rec_pose = {rid: pose for rid, _, pose in recs}
        for otype in [obj] + [o for o in present if o != obj]:
            allowed = [
                r for r in by_type if otype in rules.holds[r] and not (otype == obj and r in banned)
            ]
            if not allowed:
                if otype == obj:
                    return None
                continue
            if otype == obj:
                lo, hi = (2, 4) if task_type == "pick_two_obj_and_place" else (1, 3)
            else:
                lo, hi = 1, 3
            for _ in range(int(rng.integers(lo, hi + 1))):
                rid = by_type[allowed[int(rng.integers(len(allowed)))]]
                rid = rid[int(rng.integers(len(rid)))]
                name = self._object_id(otype, rec_pose[rid], rid, rng, used_ids)
                placed[name] = (otype, rid)
        lamp_holders = [rid for t in LAMP_HOLDERS for rid in by_type.get(t, [])]
        for lamp in LAMPS:
            if lamp in scene.types and lamp_holders:
                rid = lamp_holders[int(rng.integers(len(lamp_holders)))]
                name = self._object_id(lamp, rec_pose[rid], rid, rng, used_ids)
                placed[name] = (lamp, rid)
        if toggle and not any(t == toggle for t, _ in placed.values()):
            return None

        rec_locs = receptacle_locations(recs)
        start = self._agent_start(scene, set(rec_locs.values()), rng)
        if start is None:
            return None
        templates = self.goals[task_type]["templates"]
        names = {
            "obj": obj.lower(),
            "recep": parent.lower(),
            "toggle": toggle.lower(),
            "mrecep": "",
        }
        goal_text = templates[int(rng.integers(len(templates)))].format(**names)
        goal = self.goals[task_type]["pddl"].format(obj=obj, recep=parent, toggle=toggle, mrecep="")
        problem = self._problem(recs, rec_locs, placed, start, goal.replace("#", "-"), obj)
        params = {
            "object_target": obj,
            "parent_target": parent,
            "toggle_target": toggle,
            "mrecep_target": "",
            "object_sliced": False,
        }
        entropy = int(rng.integers(2**32))
        objects = {name: t for name, (t, _) in placed.items()}
        return GameSpec(task_type, scene, params, goal_text, problem, entropy, objects)

    def _draw_task(self, task_type, present, holders, by_type, scene, rng, spec=None):
        rules = self.rules
        if task_type == "look_at_obj_in_light":
            lamps = [lamp for lamp in LAMPS if lamp in scene.types]
            if spec is not None:
                ok = spec.obj in present and spec.target in lamps
                lamps, present = ([spec.target], [spec.obj]) if ok else ([], [])
            if not lamps or not present or not any(t in by_type for t in LAMP_HOLDERS):
                return None
            obj = present[int(rng.integers(len(present)))]
            return obj, "", lamps[int(rng.integers(len(lamps)))]
        affordance, appliance = _NEEDS.get(task_type, (None, None))
        if appliance and appliance not in by_type:
            return None
        excluded = _EXCLUDED_TARGETS.get(task_type, set())
        options = []
        for o in present:
            if affordance and o not in rules.affordances[affordance]:
                continue
            if spec is not None and o != spec.obj:
                continue
            # the target needs another receptacle type to start in
            targets = [r for r in holders[o] if r not in excluded and len(holders[o]) > 1]
            if spec is not None:
                targets = [r for r in targets if r == spec.target]
            if targets:
                options.append((o, targets))
        if not options:
            return None
        obj, targets = options[int(rng.integers(len(options)))]
        return obj, targets[int(rng.integers(len(targets)))], ""

    def _receptacles(self, scene: Scene, rng: np.random.Generator):
        recs = list(scene.receptacles)
        listed = {t for _, t, _ in recs}
        points = scene.points
        for rtype in sorted(t for t in scene.types if t in self.rules.holds and t not in listed):
            for _ in range(DEFAULT_INSTANCES.get(rtype, 1)):
                x, z = points[int(rng.integers(len(points)))]
                y = float(rng.uniform(0.0, 1.0))
                rid = f"{rtype}|{_coord(x)}|{_coord(y)}|{_coord(z)}"
                if rtype in ("SinkBasin", "BathtubBasin"):  # basins are named after their sink
                    rid = f"{rtype[:-5]}|{_coord(x)}|{_coord(y)}|{_coord(z)}|{rtype}"
                pose = (float(x), float(z), int(rng.integers(4)) * 90, 30)
                recs.append((rid, rtype, pose))
        return sorted(recs)

    @staticmethod
    def _object_id(otype, pose, rid, rng, used):
        base = [float(v) for v in rid.split("|")[1:4]]
        while True:
            x, y, z = (b + float(rng.uniform(-0.3, 0.3)) for b in base)
            thor_id = f"{otype}|{_coord(x)}|{_coord(y)}|{_coord(z)}"
            if thor_id not in used:
                used.add(thor_id)
                return thor_id

    @staticmethod
    def _agent_start(scene, taken, rng):
        for _ in range(50):
            x, z = scene.points[int(rng.integers(len(scene.points)))]
            loc = _loc(float(x), float(z), int(rng.integers(4)) * 90, 30)
            if loc not in taken:
                return loc
        return None

    def _problem(self, recs, rec_locs, placed, start, goal, target: str) -> str:
        rules = self.rules
        objs = {_mangle(tid): (t, _mangle(rid)) for tid, (t, rid) in placed.items()}
        recm = {_mangle(rid): t for rid, t, _ in recs}
        locs = {_mangle(rid): loc for rid, loc in rec_locs.items()}
        loc_names = sorted(set(locs.values()) | {start})
        present_types = {t for t, _ in objs.values()}
        lines = [
            "(define (problem plan_trial_agentrl)",
            "(:domain alfred)",
            "(:objects",
            "agent1 - agent",
        ]
        lines += [f"        {t}Type - otype" for t in rules.object_types]
        lines += [f"        {t}Type - rtype" for t in rules.receptacle_types]
        lines += [f"        {o} - object" for o in sorted(objs)]
        lines += [f"        {r} - receptacle" for r in sorted(recm)]
        lines += [f"        {loc} - location" for loc in loc_names]
        lines += ["        )", "", "(:init", ""]
        lines += [f"        (receptacleType {r} {t}Type)" for r, t in sorted(recm.items())]
        lines += [f"        (objectType {o} {t}Type)" for o, (t, _) in sorted(objs.items())]
        for rt in sorted({t for t in recm.values()}):
            lines += [
                f"        (canContain {rt}Type {ot}Type)"
                for ot in sorted(rules.holds[rt] & present_types)
            ]
        for o, (t, _) in sorted(objs.items()):
            if t in rules.pickupable:
                lines.append(f"        (pickupable {o})")
            if t in rules.movable_receptacles:
                lines.append(f"        (isReceptacleObject {o})")
            for aff, pred in (
                ("Cleanable", "cleanable"),
                ("Heatable", "heatable"),
                ("Coolable", "coolable"),
                ("Toggleable", "toggleable"),
                ("Sliceable", "sliceable"),
            ):
                if t in rules.affordances[aff]:
                    lines.append(f"        ({pred} {o})")
        lines += [f"        (openable {r})" for r, t in sorted(recm.items()) if t in rules.openable]
        # alfworld's PlannedGameState.state_to_pddl: a target-type object that starts in a fridge
        # is already cool.
        lines += [
            f"        (isCool {o})"
            for o, (t, r) in sorted(objs.items())
            if t == target and recm[r] == "Fridge"
        ]
        lines.append(f"        (atLocation agent1 {start})")
        lines += [f"        (inReceptacle {o} {r})" for o, (_, r) in sorted(objs.items())]
        lines += [f"        (receptacleAtLocation {r} {locs[r]})" for r in sorted(recm)]
        lines += [f"        (objectAtLocation {o} {locs[r]})" for o, (_, r) in sorted(objs.items())]
        lines += ["        )", "", goal.strip("\n")]
        return "\n".join(lines) + "\n"

    # -- checking ------------------------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = Engine()
        return self._engine

    def game_data(self, spec: GameSpec) -> dict[str, Any]:
        return {
            "pddl_domain": self.domain,
            "grammar": self.grammar.replace("UNKNOWN GOAL", spec.goal_text),
            "pddl_problem": spec.problem,
            "solvable": None,
            "walkthrough": None,
        }

    def solve(self, spec: GameSpec) -> list[str] | None:
        """Solve the game on the real engine with the full-knowledge expert (``oracle.py``).

        The expert's shortest plan is replayed: every command must be admissible and the game
        must be won, within ``max_plan_steps``; returns the commands (the walkthrough), or None.
        """
        task = Task.from_params(spec.task_type, spec.params)
        try:
            self.engine.load("<generated game>", self.game_data(spec))
            state = self.engine.reset()
        except GameFileError:
            return None
        if state["won"]:
            return None  # the goal must not hold at the start
        statics = read_statics(facts_of(state["_facts"]))
        names = self.engine.entity_names
        commands = plan(task, statics, read_state(facts_of(state["_facts"])), names)
        if not commands or len(commands) > self.max_plan_steps:
            return None
        for cmd in commands:
            if cmd not in state["admissible_commands"]:
                return None
            state = self.engine.step(cmd)
        return commands if state["won"] else None

    def make(self, task_type: str, split: str, seed: int, index: int) -> tuple[GameSpec, list[str]]:
        """Game ``index`` of ``task_type`` in ``split`` for ``seed``: drawn until solvable."""
        rng = np.random.default_rng(
            [int(seed), SPLITS.index(split), _type_index(task_type), int(index)]
        )
        for _ in range(_MAX_ATTEMPTS):
            task = self.draw_spec(task_type, split, rng)
            spec = self.draw(task_type, self.scenes[task.scene], rng, task)
            if spec is None:
                continue
            plan = self.solve(spec)
            if plan is not None:
                return spec, plan
        raise GenerationError(
            f"no solvable {task_type} game in {_MAX_ATTEMPTS} draws (seed {seed}, index {index})"
        )

    def write(
        self, spec: GameSpec, plan: list[str], split_dir: Path, seed: int, index: int, split: str
    ) -> Path:
        """Write one game in the official layout (atomically: a temp dir renamed into place)."""
        trial = split_dir / spec.dir_name / trial_name(seed, index)
        if trial.exists():
            return trial
        trial.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=trial.parent))
        data = self.game_data(spec)
        data["solvable"], data["walkthrough"] = True, plan
        traj = {
            "task_id": trial_name(seed, index),
            "task_type": spec.task_type,
            "pddl_params": spec.params,
            "scene": {
                "floor_plan": spec.scene.floor_plan,
                "scene_num": spec.scene.number,
                "random_seed": spec.seed_entropy,
            },
            "turk_annotations": {
                "anns": [{"task_desc": spec.goal_text, "high_descs": [], "votes": []}]
            },
            "agentrl_generator": {
                "version": GENERATOR_VERSION,
                "seed": seed,
                "split": split,
                "index": index,
            },
        }
        (tmp / "traj_data.json").write_text(json.dumps(traj, indent=1))
        (tmp / "initial_state.pddl").write_text(spec.problem)
        (tmp / "game.tw-pddl").write_text(json.dumps(data))
        try:
            os.rename(tmp, trial)
        except OSError:  # written meanwhile by another process: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
        return trial

    def close(self) -> None:
        if self._engine is not None and self._own_engine:
            self._engine.close()
        self._engine = None


def receptacle_locations(recs) -> dict[str, str]:
    """Each receptacle's location: the pose the agent uses it from, as in the official games.

    Receptacles with the same pose share a location (e.g. stacked drawers opened from one spot):
    "go to" either one puts the agent at both, and ``look`` lists both.
    """
    return {rid: _loc(x, z, rot, horizon) for rid, _, (x, z, rot, horizon) in recs}


def _type_index(task_type: str) -> int:
    return next(k for k, v in TASK_TYPES.items() if v == task_type)


def find_trial(split_dir: Path, task_type: str, seed: int, index: int) -> Path | None:
    """The already written trial directory of a generated game, if any."""
    if not split_dir.is_dir():
        return None
    for path in split_dir.glob(f"{task_type}-*/{trial_name(seed, index)}"):
        if (path / "game.tw-pddl").is_file() and (path / "traj_data.json").is_file():
            return path
    return None


def generate_games(
    out: str | Path,
    per_type: int | str | dict[str, int | str],
    seed: int = 0,
    splits: Sequence[str] = SPLITS,
    task_types: Iterable[int | str] | None = None,
    max_plan_steps: int = 30,
    progress: bool = True,
) -> dict[str, Any]:
    """Generate games under ``out/json_2.1.1/<split>/`` (existing ones are kept, not redone).

    ``per_type``: games per task type and split: an int, ``"official"`` (the released split's
    per-type counts), or a dict split -> either. Returns a summary: games per split and task
    type, new games written, seconds spent.
    """
    splits = list(splits)
    for s in splits:
        if s not in SPLITS:
            raise ValueError(f"unknown split {s!r}; expected one of {SPLITS}")
    types = parse_task_types(task_types)
    given = per_type if isinstance(per_type, dict) else dict.fromkeys(splits, per_type)
    counts: dict[str, dict[str, int]] = {}
    for s in splits:
        n = given.get(s, 0)
        if n == "official":
            counts[s] = {t: official_counts(s)[t] for t in types}
        elif isinstance(n, int) and not isinstance(n, bool) and n >= 0:
            counts[s] = dict.fromkeys(types, n)
        else:
            raise ValueError(f"per_type must be an integer >= 0 or 'official', got {n!r} for {s}")
    root = Path(out) / JSON_DIR
    jobs = [(s, t, k) for s in splits for t in types for k in range(counts[s][t])]
    gen: Generator | None = None
    written, t0 = 0, time.perf_counter()
    bar = _progress(len(jobs), progress)
    try:
        for s, t, k in jobs:
            if find_trial(root / s, t, seed, k) is None:
                gen = gen or Generator(max_plan_steps)
                spec, plan = gen.make(t, s, seed, k)
                gen.write(spec, plan, root / s, seed, k, s)
                written += 1
            bar.update(1)
    finally:
        bar.close()
        if gen is not None:
            gen.close()
    summary = {
        "out": str(root),
        "seed": seed,
        "games": counts,
        "written": written,
        "seconds": round(time.perf_counter() - t0, 2),
    }
    return summary


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, enabled: bool):
    if not enabled:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with alfworld
        return _NoBar()
    return tqdm(total=total, desc="ALFWorld games", unit="game", file=sys.stderr)


def _per_type(value: str) -> int | str:
    if value == "official":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an integer or 'official', got {value!r}"
        ) from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agentrl.envs.alfworld.generate",
        description="Generate ALFWorld games offline, in the official json_2.1.1 layout.",
    )
    parser.add_argument(
        "--out", required=True, help="output directory (games go to OUT/json_2.1.1/<split>/)"
    )
    parser.add_argument(
        "--per-type",
        type=_per_type,
        required=True,
        help="games per task type and split, or 'official' (the released splits' counts)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--splits", nargs="+", default=list(SPLITS), choices=SPLITS)
    parser.add_argument(
        "--task-types", nargs="+", default=None, help="1-6, names or short names (default: all)"
    )
    parser.add_argument(
        "--max-plan-steps", type=int, default=30, help="redraw games whose plan is longer"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    try:
        summary = generate_games(
            args.out,
            args.per_type,
            seed=args.seed,
            splits=args.splits,
            task_types=args.task_types,
            max_plan_steps=args.max_plan_steps,
            progress=not args.quiet,
        )
    except (ValueError, GenerationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
