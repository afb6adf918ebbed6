"""The true state of an ALFWorld game, read from the engine's PDDL facts.

Pure functions over fact tuples ``(predicate, arg, ...)`` (lower case, as Fast Downward gives
them): :func:`read_statics` once per game, :func:`read_state` after every step. On top of them:
the canonical :func:`state_key` and the task :func:`milestones`.

What counts as state: the agent's location, what it holds, every object's receptacle and
location (``objectAtLocation``: ``look`` lists the objects at the agent's location that are not in
a receptacle there, so with receptacles sharing a location it shows in the text), which
receptacles are open, and the objects' hot/cool/clean/on/toggled/sliced flags. Bookkeeping
facts the domain sets on ``look``/``examine``/``inventory`` (``checked``) are not state: they
change no precondition or goal, so "look" leaves the state key unchanged.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MILESTONES",
    "State",
    "Statics",
    "Task",
    "check_task",
    "facts_of",
    "goal_met",
    "milestones",
    "placed_targets",
    "reached",
    "read_state",
    "read_statics",
    "state_key",
]

Fact = tuple[str, ...]
_FLAGS = ("ishot", "iscool", "isclean", "ison", "istoggled", "issliced")

#: Milestones of each task type, in the order a solution reaches them; the last one is the goal.
MILESTONES: dict[str, tuple[str, ...]] = {
    "pick_and_place_simple": ("found", "picked", "placed"),
    "look_at_obj_in_light": ("found", "picked", "lamp_on", "looked"),
    "pick_clean_then_place_in_recep": ("found", "picked", "cleaned", "placed"),
    "pick_heat_then_place_in_recep": ("found", "picked", "heated", "placed"),
    "pick_cool_then_place_in_recep": ("found", "picked", "cooled", "placed"),
    "pick_two_obj_and_place": ("found", "picked", "placed_1", "picked_2", "placed_2"),
}
_TREATED = {"cleaned": "isclean", "heated": "ishot", "cooled": "iscool"}


def facts_of(propositions: Iterable[Any]) -> list[Fact]:
    """TextWorld ``Proposition`` objects -> plain tuples ``(name, arg1, ...)``."""
    return [(p.name, *(v.name for v in p.arguments)) for p in propositions]


@dataclass(frozen=True)
class Statics:
    """Facts that never change in a game: types, places of receptacles, affordances."""

    otype: dict[str, str]  # object -> type ("apple")
    rtype: dict[str, str]  # receptacle -> type ("fridge")
    rloc: dict[str, str]  # receptacle -> its location
    openable: frozenset[str]
    can_contain: frozenset[tuple[str, str]]  # (receptacle type, object type)

    def receptacles_of(self, rtype: str) -> list[str]:
        return sorted(r for r, t in self.rtype.items() if t == rtype)

    def objects_of(self, otype: str) -> list[str]:
        return sorted(o for o, t in self.otype.items() if t == otype)


@dataclass(frozen=True)
class State:
    """The dynamic part of the state (see the module docstring)."""

    at: str | None
    held: str | None
    inrec: tuple[tuple[str, str], ...]  # sorted (object, receptacle)
    opened: frozenset[str]
    flags: tuple[tuple[str, frozenset[str]], ...]  # (flag predicate, objects having it)
    objloc: tuple[tuple[str, str], ...] = ()  # sorted (object, location)

    def where(self, obj: str) -> str | None:
        return dict(self.inrec).get(obj)

    def has(self, flag: str, obj: str) -> bool:
        return obj in dict(self.flags).get(flag, frozenset())


@dataclass(frozen=True)
class Task:
    """What a game asks: task type and the targets of ``traj_data.json``'s ``pddl_params``."""

    task_type: str
    obj: str  # object type, lower case ("apple")
    parent: str  # receptacle type ("fridge"), "" for look tasks
    toggle: str  # lamp type ("desklamp"), "" unless look task

    @classmethod
    def from_params(cls, task_type: str, params: dict[str, Any]) -> Task:
        def low(key: str) -> str:
            return str(params.get(key) or "").lower()

        return cls(task_type, low("object_target"), low("parent_target"), low("toggle_target"))


def check_task(task: Task, st: Statics, source: object) -> None:
    """The task's targets must exist in the game (``source``, the traj file, names the error)."""
    from .engine import GameFileError

    wanted = [("object_target", task.obj, set(st.otype.values()))]
    if task.task_type == "look_at_obj_in_light":
        wanted.append(("toggle_target", task.toggle, set(st.otype.values())))
    else:
        wanted.append(("parent_target", task.parent, set(st.rtype.values())))
    for key, value, present in wanted:
        if value not in present:
            raise GameFileError(
                f"{source}: pddl_params[{key!r}]={value!r} is not a type in the game "
                f"(its types: {sorted(present)})"
            )


def _strip(t: str) -> str:
    return t[:-4] if t.endswith("type") else t


def read_statics(facts: Sequence[Fact]) -> Statics:
    otype, rtype, rloc, openable, can = {}, {}, {}, set(), set()
    for f in facts:
        name = f[0]
        if name == "objecttype":
            otype[f[1]] = _strip(f[2])
        elif name == "receptacletype":
            rtype[f[1]] = _strip(f[2])
        elif name == "receptacleatlocation":
            rloc[f[1]] = f[2]
        elif name == "openable":
            openable.add(f[1])
        elif name == "cancontain":
            can.add((_strip(f[1]), _strip(f[2])))
    return Statics(otype, rtype, rloc, frozenset(openable), frozenset(can))


def read_state(facts: Sequence[Fact]) -> State:
    at = held = None
    inrec, objloc, opened = [], [], set()
    flags: dict[str, set[str]] = {k: set() for k in _FLAGS}
    for f in facts:
        name = f[0]
        if name == "inreceptacle":
            inrec.append((f[1], f[2]))
        elif name == "atlocation":
            at = f[2]
        elif name == "objectatlocation":
            objloc.append((f[1], f[2]))
        elif name == "holds":
            held = f[2]
        elif name == "opened":
            opened.add(f[1])
        elif name in flags:
            flags[name].add(f[1])
    return State(
        at,
        held,
        tuple(sorted(inrec)),
        frozenset(opened),
        tuple((k, frozenset(v)) for k, v in flags.items()),
        tuple(sorted(objloc)),
    )


def state_key(state: State) -> str:
    """Canonical identity of the state: a digest of its sorted contents (equal iff equal)."""
    parts = [
        f"at={state.at}",
        f"held={state.held}",
        "in=" + ",".join(f"{o}>{r}" for o, r in state.inrec),
        "open=" + ",".join(sorted(state.opened)),
        "loc=" + ",".join(f"{o}@{loc}" for o, loc in state.objloc),
    ]
    parts += [f"{k}=" + ",".join(sorted(v)) for k, v in state.flags]
    return hashlib.blake2b("|".join(parts).encode(), digest_size=16).hexdigest()


# -- task progress ---------------------------------------------------------------------------
def placed_targets(task: Task, st: Statics, s: State) -> dict[str, list[str]]:
    """Parent-type receptacle -> target-type objects in it."""
    out: dict[str, list[str]] = {}
    for o, r in s.inrec:
        if st.otype.get(o) == task.obj and st.rtype.get(r) == task.parent:
            out.setdefault(r, []).append(o)
    return out


def _visible(st: Statics, s: State, otype: str) -> bool:
    """A target-type object is in a receptacle at the agent's location, and not shut in."""
    for o, r in s.inrec:
        if (
            st.otype.get(o) == otype
            and st.rloc.get(r) == s.at
            and (r not in st.openable or r in s.opened)
        ):
            return True
    return False


def goal_met(task: Task, st: Statics, s: State) -> bool:
    """The task's PDDL goal, evaluated on the state (the engine's ``won`` is authoritative)."""
    t = task.task_type
    if t == "look_at_obj_in_light":
        return _looked(task, st, s)
    placed = placed_targets(task, st, s)
    if t == "pick_two_obj_and_place":
        return any(len(v) >= 2 for v in placed.values())
    flag = {
        "pick_clean_then_place_in_recep": "isclean",
        "pick_heat_then_place_in_recep": "ishot",
        "pick_cool_then_place_in_recep": "iscool",
    }.get(t)
    return any(flag is None or s.has(flag, o) for v in placed.values() for o in v)


def _lamp_on(task: Task, st: Statics, s: State) -> bool:
    return any(st.otype.get(o) == task.toggle for o in dict(s.flags)["istoggled"])


def _looked(task: Task, st: Statics, s: State) -> bool:
    if s.held is None or st.otype.get(s.held) != task.obj:
        return False
    for o, r in s.inrec:
        if st.otype.get(o) == task.toggle and s.has("istoggled", o) and st.rloc.get(r) == s.at:
            return True
    return False


def reached(task: Task, st: Statics, s: State, won: bool) -> set[str]:
    """The milestones whose condition holds in this state."""
    out = set()
    holding = s.held is not None and st.otype.get(s.held) == task.obj
    if holding or _visible(st, s, task.obj):
        out.add("found")
    if holding:
        out.add("picked")
    t = task.task_type
    if t == "look_at_obj_in_light":
        if _lamp_on(task, st, s):
            out.add("lamp_on")
    elif t == "pick_two_obj_and_place":
        n = max((len(v) for v in placed_targets(task, st, s).values()), default=0)
        if n >= 1:
            out.add("placed_1")
            if holding:
                out.add("picked_2")
    elif t in (
        "pick_clean_then_place_in_recep",
        "pick_heat_then_place_in_recep",
        "pick_cool_then_place_in_recep",
    ):
        flag = _TREATED[MILESTONES[t][2]]
        if any(s.has(flag, o) for o, ty in st.otype.items() if ty == task.obj):
            out.add(MILESTONES[t][2])
    if won:
        out.add(MILESTONES[t][-1])
    return out


def milestones(
    task: Task, st: Statics, s: State, won: bool, so_far: Sequence[str] = ()
) -> tuple[str, ...]:
    """Milestones reached so far, in the order first reached (new ones in canonical order)."""
    new = reached(task, st, s, won) - set(so_far)
    order = MILESTONES[task.task_type]
    return tuple(so_far) + tuple(m for m in order if m in new)
