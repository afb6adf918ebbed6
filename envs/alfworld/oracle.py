"""A full-knowledge ALFWorld expert: the next command of a shortest solution, from the true state.

The ALFWorld package offers two experts: Fast Downward's replanner (blind uniform-cost search:
exact, but it takes minutes on kitchen scenes with twenty openable receptacles) and a hand-coded
expert that explores receptacles one by one (it sees only what the agent sees, and can need
more than 50 steps in large rooms). This expert knows the true state, like the planner, and
follows the plan every solution of the six task types shares: go to a receptacle holding a
target object (open it if needed), take it; heat/cool/clean it at the appliance if the task asks;
for Look, go to the lamp and use it; otherwise go to a target receptacle (open it if needed) and
put the object there; Pick2 repeats for a second object into the same receptacle. Each
``go to``/``open``/``take``/``move`` is one step, so the plan has the planner's length whenever
no object needs moving out of the way (in ALFWorld nothing ever does: receptacles have no
capacity).

Pure function of the task, the static facts, the state and the entity names.
"""

from __future__ import annotations

from .world import State, Statics, Task, placed_targets

__all__ = ["next_command"]

_TREAT = {  # task type -> (flag, appliance type, verb)
    "pick_clean_then_place_in_recep": ("isclean", "sinkbasin", "clean"),
    "pick_heat_then_place_in_recep": ("ishot", "microwave", "heat"),
    "pick_cool_then_place_in_recep": ("iscool", "fridge", "cool"),
}


def next_command(task: Task, st: Statics, s: State, names: dict[str, str]) -> str | None:
    """The expert's next command, or None when the state offers no way (never in valid games)."""
    ctx = _Ctx(task, st, s, names)
    try:
        return ctx.next()
    except _NoWay:
        return None


class _NoWay(Exception):
    pass


class _Ctx:
    def __init__(self, task: Task, st: Statics, s: State, names: dict[str, str]):
        self.task, self.st, self.s, self.names = task, st, s, names

    def name(self, entity: str) -> str:
        return self.names[entity]

    def at(self, r: str) -> bool:
        return self.s.at == self.st.rloc.get(r)

    def closed(self, r: str) -> bool:
        return r in self.st.openable and r not in self.s.opened

    def best(self, receptacles: list[str]) -> str:
        """Prefer the receptacle here, then one not closed, then by id (deterministic)."""
        if not receptacles:
            raise _NoWay
        return min(receptacles, key=lambda r: (not self.at(r), self.closed(r), r))

    def reach(self, r: str, then: str) -> str:
        if not self.at(r):
            return f"go to {self.name(r)}"
        if self.closed(r):
            return f"open {self.name(r)}"
        return then

    def next(self) -> str:
        task, st, s = self.task, self.st, self.s
        held = s.held
        holding_target = held is not None and st.otype.get(held) == task.obj
        if held is not None and not holding_target:
            return self.put_away(held)
        if task.task_type == "look_at_obj_in_light":
            if not holding_target:
                return self.fetch(exclude=None)
            lamps = [o for o in st.objects_of(task.toggle) if s.where(o) is not None]
            if not lamps:
                raise _NoWay
            lamp = min(lamps, key=lambda o: (not self.at(s.where(o)), o))
            r = s.where(lamp)
            return f"use {self.name(lamp)}" if self.at(r) else f"go to {self.name(r)}"
        dest = self.destination()
        if not holding_target:
            return self.fetch(exclude=dest)
        treat = _TREAT.get(task.task_type)
        if treat and not s.has(treat[0], held):
            app = self.best(st.receptacles_of(treat[1]))
            if not self.at(app):
                return f"go to {self.name(app)}"
            return f"{treat[2]} {self.name(held)} with {self.name(app)}"
        return self.reach(dest, f"move {self.name(held)} to {self.name(dest)}")

    def destination(self) -> str:
        """The target receptacle; for Pick2 the one already holding a target object."""
        placed = placed_targets(self.task, self.st, self.s)
        if self.task.task_type == "pick_two_obj_and_place" and placed:
            return max(sorted(placed), key=lambda r: len(placed[r]))
        return self.best(self.st.receptacles_of(self.task.parent))

    def fetch(self, exclude: str | None) -> str:
        """Go to and take a target object (not one already in ``exclude``)."""
        s = self.s
        options = [
            o for o in self.st.objects_of(self.task.obj) if s.where(o) not in (None, exclude)
        ]
        if not options:
            raise _NoWay
        o = min(options, key=lambda o: (not self.at(s.where(o)), self.closed(s.where(o)), o))
        r = s.where(o)
        return self.reach(r, f"take {self.name(o)} from {self.name(r)}")

    def put_away(self, held: str) -> str:
        """Put down an object the task does not need, where it is allowed to go."""
        otype = self.st.otype.get(held)
        ok = [r for r, t in self.st.rtype.items() if (t, otype) in self.st.can_contain]
        r = self.best(ok)
        return self.reach(r, f"move {self.name(held)} to {self.name(r)}")
