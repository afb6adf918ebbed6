"""A full-knowledge ALFWorld expert: the first command of a shortest solution from the true state.

The ALFWorld package offers two experts: Fast Downward's replanner (blind uniform-cost search:
exact, but it takes minutes on kitchen scenes with twenty openable receptacles) and a hand-coded
expert that explores receptacles one by one (it sees only what the agent sees, and can need more
than 50 steps in large rooms). This expert knows the true state, like the planner, and returns a
shortest plan in commands.

Why enumeration is exact: in the ALFWorld domain every command costs one step, objects never
block each other (receptacles have no capacity), closing is never needed, and the only commands
that change what later commands may do are ``go to`` (the agent's location), ``open`` (a
receptacle stays open), ``take``/``move`` and the treatment (``heat``/``cool``/``clean``) or
``use``. So every solution is, up to useless detours, one of a few shapes: put away a held
object the task does not need; take a target object (go to its receptacle if elsewhere, open it
if closed); treat it at an appliance unless it already has the flag (go there if elsewhere);
for Look, be at a lamp's location and use it (unless it is already on); otherwise go to a target
receptacle, open it if closed, move the object there; Pick2 twice into one receptacle (one
already there counts). :func:`plan` tries every choice of held-object drop site, target
object(s), appliance, lamp and destination, counts the commands of each, and keeps the shortest
(ties: by entity ids, deterministic). Its length is the optimum Fast Downward finds when all
action costs are one; ``tests/envs/test_alfworld_engine.py`` compares them on generated games.

Pure functions of the task, the static facts, the state and the entity names.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .world import State, Statics, Task

__all__ = ["next_command", "plan"]

_TREAT = {  # task type -> (flag, appliance type, verb)
    "pick_clean_then_place_in_recep": ("isclean", "sinkbasin", "clean"),
    "pick_heat_then_place_in_recep": ("ishot", "microwave", "heat"),
    "pick_cool_then_place_in_recep": ("iscool", "fridge", "cool"),
}


def next_command(task: Task, st: Statics, s: State, names: dict[str, str]) -> str | None:
    """The expert's next command, or None when the state offers no way (never in valid games)."""
    commands = plan(task, st, s, names)
    return commands[0] if commands else None


def plan(task: Task, st: Statics, s: State, names: dict[str, str]) -> list[str] | None:
    """A shortest list of commands from ``s`` to the goal ([] if met; None if none exists)."""
    start = _Sim(st, names, s.at, s.held, s.opened, dict(s.inrec), _flagged(s))
    if _done(task, st, start):
        return []
    best: list[str] | None = None
    for sim in _drop_held(task, st, start):
        for cand in _solve(task, st, sim):
            if best is None or len(cand.commands) < len(best):
                best = cand.commands
    return best


@dataclass
class _Sim:
    """An abstract copy of the state a candidate plan walks through, and its commands so far."""

    st: Statics
    names: dict[str, str]
    at: str | None
    held: str | None
    opened: frozenset[str]
    where: dict[str, str]  # object -> receptacle
    flags: frozenset[tuple[str, str]]  # (flag, object)
    commands: list[str] = field(default_factory=list)

    def copy(self) -> _Sim:
        return replace(self, where=dict(self.where), commands=list(self.commands))

    def n(self, e: str) -> str:
        return self.names[e]

    def goto(self, r: str) -> None:
        loc = self.st.rloc.get(r)
        if self.at != loc:
            self.commands.append(f"go to {self.n(r)}")
            self.at = loc

    def reach(self, r: str) -> None:
        """Be at ``r`` with it open (if it opens)."""
        self.goto(r)
        if r in self.st.openable and r not in self.opened:
            self.commands.append(f"open {self.n(r)}")
            self.opened = self.opened | {r}

    def take(self, o: str) -> None:
        r = self.where.pop(o)
        self.reach(r)
        self.commands.append(f"take {self.n(o)} from {self.n(r)}")
        self.held = o

    def put(self, r: str) -> None:
        o = self.held
        assert o is not None
        self.reach(r)
        self.commands.append(f"move {self.n(o)} to {self.n(r)}")
        self.where[o] = r
        self.held = None

    def treat(self, flag: str, app: str | None, verb: str) -> bool:
        """Give the held object ``flag`` at ``app`` unless it has it (False: no appliance)."""
        o = self.held
        assert o is not None
        if (flag, o) in self.flags:
            return True
        if app is None:
            return False
        self.goto(app)
        self.commands.append(f"{verb} {self.n(o)} with {self.n(app)}")
        self.flags = self.flags | {(flag, o)}
        return True


def _flagged(s: State) -> frozenset[tuple[str, str]]:
    return frozenset((flag, o) for flag, objs in s.flags for o in objs)


def _done(task: Task, st: Statics, sim: _Sim) -> bool:
    if task.task_type == "look_at_obj_in_light":
        holding = sim.held is not None and st.otype.get(sim.held) == task.obj
        return holding and any(
            st.otype.get(o) == task.toggle
            and ("istoggled", o) in sim.flags
            and st.rloc.get(r) == sim.at
            for o, r in sim.where.items()
        )
    counts: dict[str, int] = {}
    treat = _TREAT.get(task.task_type)
    for o, r in sim.where.items():
        if st.otype.get(o) != task.obj or st.rtype.get(r) != task.parent:
            continue
        if treat is None or (treat[0], o) in sim.flags:
            counts[r] = counts.get(r, 0) + 1
    need = 2 if task.task_type == "pick_two_obj_and_place" else 1
    return any(n >= need for n in counts.values())


def _drop_held(task: Task, st: Statics, sim: _Sim) -> list[_Sim]:
    """States after putting away a held object the task does not use (every allowed spot)."""
    if sim.held is None or st.otype.get(sim.held) == task.obj:
        return [sim]
    otype = st.otype.get(sim.held)
    out = []
    for r in sorted(st.rtype):
        if (st.rtype[r], otype) in st.can_contain:
            nxt = sim.copy()
            nxt.put(r)
            out.append(nxt)
    return out


def _targets(task: Task, st: Statics, sim: _Sim) -> list[str]:
    return sorted(o for o, t in st.otype.items() if t == task.obj and o in sim.where)


def _solve(task: Task, st: Statics, sim: _Sim) -> list[_Sim]:
    """Every candidate solution from ``sim`` (holding nothing, or a target object)."""
    if task.task_type == "look_at_obj_in_light":
        return _solve_look(task, st, sim)
    treat = _TREAT.get(task.task_type)
    apps: list[str | None] = list(st.receptacles_of(treat[1])) if treat else []
    apps = apps or [None]  # no appliance: only objects that already have the flag will do
    out: list[_Sim] = []
    for dest in st.receptacles_of(task.parent):
        if task.task_type == "pick_two_obj_and_place":
            out += _solve_pick_two(task, st, sim, dest)
            continue
        sources = [sim.held] if sim.held is not None else _targets(task, st, sim)
        for o in sources:
            for app in apps:
                c = sim.copy()
                if c.held is None:
                    c.take(o)
                if treat is not None and not c.treat(treat[0], app, treat[2]):
                    continue
                c.put(dest)
                out.append(c)
    return out


def _solve_pick_two(task: Task, st: Statics, sim: _Sim, dest: str) -> list[_Sim]:
    inside = [o for o in _targets(task, st, sim) if sim.where[o] == dest]
    need = max(0, 2 - len(inside))
    outside = [o for o in _targets(task, st, sim) if sim.where[o] != dest]
    firsts = [sim.held] if sim.held is not None else outside
    out = []
    for o1 in firsts:
        c1 = sim.copy()
        if c1.held is None:
            c1.take(o1)
        c1.put(dest)
        if need <= 1:
            out.append(c1)
            continue
        for o2 in outside:
            if o2 == o1:
                continue
            c2 = c1.copy()
            c2.take(o2)
            c2.put(dest)
            out.append(c2)
    return out


def _solve_look(task: Task, st: Statics, sim: _Sim) -> list[_Sim]:
    lamps = sorted(o for o, t in st.otype.items() if t == task.toggle and o in sim.where)
    sources = [sim.held] if sim.held is not None else _targets(task, st, sim)
    out = []
    for o in sources:
        for lamp in lamps:
            c = sim.copy()
            if c.held is None:
                c.take(o)
            c.goto(c.where[lamp])
            if ("istoggled", lamp) not in c.flags:
                c.commands.append(f"use {c.n(lamp)}")
                c.flags = c.flags | {("istoggled", lamp)}
            out.append(c)
    return out
