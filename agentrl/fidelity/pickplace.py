"""A small ALFWorld-like household task as an exact tabular MDP ("put some X in/on Y").

Modelled on ALFWorld's ``pick_and_place_simple`` text games: the agent starts in the middle of a
room with a few receptacles, some of which open and close (cabinets, drawers, fridges, ...); one
object lies in one receptacle and must be put in the target receptacle. It is not ALFWorld (no
PDDL, no TextWorld engine, one object, no examine/use): it keeps the features that matter for
credit assignment — state-dependent admissible commands, no-op commands ("look", "inventory"),
sparse reward and long detours.

Commands (admissible only where ALFWorld's would be): ``look``, ``inventory``, ``go to R``
(not where the agent already is), ``open R`` / ``close R`` (at an openable receptacle, closed /
open), ``take X from R`` (at R, X in R, R accessible: not openable, or open), ``put X in/on R``
(holding X, at R, R accessible). Reward 10 when X is put in the target (the episode ends in
success), 0 otherwise: ALFWorld's ``10 x won``. Milestones (the "sub-goal fact becomes true"
reading of BEACON): picking X up, and the winning put.

Actions are slots shared by all tasks of one size (``go to #j`` for the j-th receptacle), so
several tasks stack into one table; :class:`PickPlaceTask` holds the slot-to-text mapping.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from .mdp import TabularMDP
from .options import Subgoals

__all__ = [
    "SUBGOALS",
    "PickPlaceTask",
    "make_task",
    "pickplace_mdp",
    "pickplace_subgoals",
    "pickplace_tasks",
]

# (receptacle type, openable) as in ALFWorld's scenes.
RECEPTACLES: tuple[tuple[str, bool], ...] = (
    ("countertop", False),
    ("diningtable", False),
    ("shelf", False),
    ("sinkbasin", False),
    ("sofa", False),
    ("cabinet", True),
    ("drawer", True),
    ("fridge", True),
    ("microwave", True),
    ("safe", True),
)
OBJECTS: tuple[str, ...] = ("apple", "mug", "book", "keychain", "tomato", "cellphone", "plate")
SUCCESS_REWARD = 10.0


@dataclass(frozen=True)
class PickPlaceTask:
    """One task: receptacle names and openability, the object, where it starts, the target."""

    receptacles: tuple[str, ...]
    openable: tuple[bool, ...]
    obj: str
    obj_start: int
    target: int

    @property
    def instruction(self) -> str:
        return f"put some {self.obj} in {self.receptacles[self.target]}"

    def command(self, slot_name: str) -> str:
        """The ALFWorld-style text of an action slot (``"open #2"`` -> ``"open fridge 1"``)."""
        verb, _, j = slot_name.partition("#")
        if not j:
            return slot_name
        r = self.receptacles[int(j)]
        return {
            "go to ": f"go to {r}",
            "open ": f"open {r}",
            "close ": f"close {r}",
            "take ": f"take {self.obj} 1 from {r}",
            "put ": f"put {self.obj} 1 in/on {r}",
        }[verb]


def action_slots(n_receptacles: int) -> tuple[str, ...]:
    slots = ["look", "inventory"]
    for verb in ("go to ", "open ", "close ", "take ", "put "):
        slots += [f"{verb}#{j}" for j in range(n_receptacles)]
    return tuple(slots)


def make_task(rng: np.random.Generator, n_receptacles: int = 5) -> PickPlaceTask:
    """Draw a task: ``n_receptacles`` distinct receptacles, an object, its start and a target."""
    if not 2 <= n_receptacles <= len(RECEPTACLES):
        raise ValueError(f"n_receptacles must be in [2, {len(RECEPTACLES)}], got {n_receptacles}")
    chosen = rng.choice(len(RECEPTACLES), size=n_receptacles, replace=False)
    names = tuple(f"{RECEPTACLES[i][0]} 1" for i in chosen)
    openable = tuple(RECEPTACLES[i][1] for i in chosen)
    start, target = (int(x) for x in rng.choice(n_receptacles, size=2, replace=False))
    obj = OBJECTS[int(rng.integers(len(OBJECTS)))]
    return PickPlaceTask(names, openable, obj, start, target)


# State: (location, open bitmask, object place); location R is the middle of the room,
# object place R means "held".
_State = tuple[int, int, int]


def _state_key(task: PickPlaceTask, s: _State) -> str:
    """The readable canonical key of a state (``TabularMDP.state_keys``)."""
    R = len(task.receptacles)
    loc, opened, place = s
    where = "middle" if loc == R else task.receptacles[loc]
    opens = ",".join(task.receptacles[j] for j in range(R) if opened >> j & 1)
    held = "held" if place == R else task.receptacles[place]
    return f"at={where}|open={opens}|{task.obj}={held}"


def _step(task: PickPlaceTask, s: _State, slot: str) -> tuple[_State, bool, int] | None:
    """(next state, won, milestones) of a command, or None when it is not admissible."""
    R = len(task.receptacles)
    loc, opened, place = s
    verb, _, j_txt = slot.partition("#")
    if not j_txt:  # look / inventory: no-ops
        return s, False, 0
    j = int(j_txt)
    here = loc == j
    accessible = not task.openable[j] or bool(opened >> j & 1)
    if verb == "go to ":
        return ((j, opened, place), False, 0) if not here else None
    if verb == "open ":
        ok = here and task.openable[j] and not opened >> j & 1
        return ((loc, opened | 1 << j, place), False, 0) if ok else None
    if verb == "close ":
        ok = here and task.openable[j] and bool(opened >> j & 1)
        return ((loc, opened & ~(1 << j), place), False, 0) if ok else None
    if verb == "take ":
        ok = here and place == j and accessible
        return ((loc, opened, R), False, 1) if ok else None
    if verb == "put ":
        if not (here and place == R and accessible):
            return None
        won = j == task.target
        return (loc, opened, j), won, int(won)
    raise ValueError(f"unknown action slot {slot!r}")


def pickplace_mdp(task: PickPlaceTask, horizon: int = 12, name: str = "pickplace") -> TabularMDP:
    """The MDP of one task over the states reachable from the start (breadth-first)."""
    R = len(task.receptacles)
    slots = action_slots(R)
    start: _State = (R, 0, task.obj_start)
    index = {start: 0}
    order = [start]
    queue = deque([start])
    nxt, won, ms, mask = [], [], [], []
    while queue:
        s = queue.popleft()
        row_n, row_w, row_m, row_ok = [], [], [], []
        for slot in slots:
            out = _step(task, s, slot)
            if out is None:
                row_n.append(index[s])
                row_w.append(False)
                row_m.append(0)
                row_ok.append(False)
                continue
            s2, w, m = out
            if s2 not in index and not w:
                index[s2] = len(order)
                order.append(s2)
                queue.append(s2)
            row_n.append(index.get(s2, index[s]))  # a won put ends the episode: no next row
            row_w.append(w)
            row_m.append(m)
            row_ok.append(True)
        nxt.append(row_n)
        won.append(row_w)
        ms.append(row_m)
        mask.append(row_ok)
    won_arr = np.array(won, dtype=bool)
    return TabularMDP(
        next_state=np.array(nxt, dtype=np.int64),
        reward=np.where(won_arr, SUCCESS_REWARD, 0.0),
        done=won_arr.copy(),
        won=won_arr,
        milestone=np.array(ms, dtype=np.int64),
        mask=np.array(mask, dtype=bool),
        start=np.array([0], dtype=np.int64),
        horizon=horizon,
        state_keys=tuple(_state_key(task, s) for s in order),
        action_names=slots,
        task_names=(name,),
    )


def pickplace_tasks(
    task_seeds: list[int], n_receptacles: int = 5, horizon: int = 12
) -> list[TabularMDP]:
    """One MDP per seed (the task is drawn from ``numpy.random.default_rng(seed)``)."""
    return [
        pickplace_mdp(
            make_task(np.random.default_rng(int(s)), n_receptacles), horizon, name=f"pickplace:{s}"
        )
        for s in task_seeds
    ]


#: The plan of every task, one subgoal per stage (HiPER's subgoal span writes one of these).
SUBGOALS: tuple[str, ...] = (
    "go to the object",
    "take the object",
    "go to the target",
    "put the object in the target",
)


def pickplace_subgoals(task: PickPlaceTask, mdp: TabularMDP) -> Subgoals:
    """Which states of ``mdp`` (built by :func:`pickplace_mdp` from ``task``) achieve each subgoal.

    At the object's receptacle; holding the object; at the target; and the winning put (a
    transition, not a state: it ends the episode).
    """
    R = len(task.receptacles)
    by_key = {
        _state_key(task, s): s
        for s in (
            (loc, opened, place)
            for loc in range(R + 1)
            for opened in range(1 << R)
            for place in range(R + 1)
        )
    }
    try:
        states = [by_key[k] for k in mdp.state_keys]
    except KeyError as exc:
        raise ValueError(f"state {exc} is not a state of task {task.instruction!r}") from exc
    loc = np.array([s[0] for s in states])
    place = np.array([s[2] for s in states])
    target = np.stack(
        [loc == task.obj_start, place == R, loc == task.target, np.zeros(len(states), bool)]
    )
    return Subgoals(SUBGOALS, target, np.array([False, False, False, True]))
