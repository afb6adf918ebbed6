"""``agentrl/ALFWorld-v0``: ALFWorld's text games on the real ``alfworld``/TextWorld engine."""

from __future__ import annotations

import re
from typing import Any

from ..base import TextEnv, make_info
from ..commands import command_lower
from ..tools import fresh, tool, tool_info
from .data import GameRef, GeneratedGames, OfficialGames, read_traj
from .engine import Engine, read_game
from .oracle import next_command
from .tasks import SHORT_NAMES, SPLITS, parse_task_types
from .world import (
    MILESTONES,
    Task,
    check_task,
    facts_of,
    milestones,
    read_state,
    read_statics,
    state_key,
)

__all__ = ["ALFWorldEnv", "DEFAULT_GENERATED", "INVALID_RULES"]

#: Generated games per split when no data directory is given: games per task type, or
#: "official" for the released split's per-type counts (140 valid_seen, 134 valid_unseen).
DEFAULT_GENERATED: dict[str, int | str] = {
    "train": 100,
    "valid_seen": "official",
    "valid_unseen": "official",
}
#: What ``info["action_valid"]`` means (see the class docstring).
INVALID_RULES = ("admissible", "format")
_BANNER = "-= Welcome to TextWorld, ALFRED! =-"
_TASK_MARK = "Your task is to: "
_SPACES = re.compile(r"\s+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")  # control characters, lone surrogates
_MAX_COMMAND = 512
NOTHING = "Nothing happens."
EXPERTS = ("oracle", "planner")

#: ALFWorld's command grammar as tools for the tool-call action format (reset info).
TOOLS = tool_info(
    [
        tool("go_to", "Walk to a receptacle.", receptacle="e.g. countertop 1"),
        tool(
            "take",
            "Pick an object up from a receptacle.",
            object="e.g. apple 1",
            receptacle="where it is",
        ),
        tool(
            "move",
            "Put the held object in or on a receptacle.",
            object="the held object",
            receptacle="the target",
        ),
        tool("open", "Open a receptacle.", receptacle="e.g. fridge 1"),
        tool("close", "Close a receptacle.", receptacle="e.g. fridge 1"),
        tool(
            "heat",
            "Heat an object with an appliance.",
            object="the object",
            receptacle="e.g. microwave 1",
        ),
        tool(
            "cool",
            "Cool an object with an appliance.",
            object="the object",
            receptacle="e.g. fridge 1",
        ),
        tool(
            "clean",
            "Clean an object in a sink.",
            object="the object",
            receptacle="e.g. sinkbasin 1",
        ),
        tool("use", "Use (switch on) an object.", object="e.g. desklamp 1"),
        tool("examine", "Look closely at an object or receptacle.", target="what to examine"),
        tool("look", "Describe the surroundings."),
        tool("inventory", "List what you carry."),
    ],
    {
        "go_to": "go to {receptacle}",
        "take": "take {object} from {receptacle}",
        "move": "move {object} to {receptacle}",
        "open": "open {receptacle}",
        "close": "close {receptacle}",
        "heat": "heat {object} with {receptacle}",
        "cool": "cool {object} with {receptacle}",
        "clean": "clean {object} with {receptacle}",
        "use": "use {object}",
        "examine": "examine {target}",
        "look": "look",
        "inventory": "inventory",
    },
)


class ALFWorldEnv(TextEnv):
    """ALFWorld (Shridhar et al., 2021) text games, played on the ``alfworld`` package's engine.

    - Data: ``data_dir`` in the official layout (``$ALFWORLD_DATA``, or a directory written by
      ``python -m agentrl.envs.alfworld.generate``); unset, generated games from the cache
      (``cache_dir``, default ``~/.cache/agentrl/alfworld``), made on first use: ``generated``
      gives per split the games per task type, or ``"official"`` for the released split's
      per-type counts (default ``{"train": 100, "valid_seen": "official", "valid_unseen":
      "official"}``: 600, 140, 134 games) and ``generator_seed`` the seed. ``order``:
      ``interleaved`` (default) or ``alfworld`` (``AlfredTWEnv``'s walk order shuffled with
      ``order_seed``, 1234 as TextWorld does; official data only).
    - Tasks: ``reset(seed=s)`` plays training game ``s mod n`` of ``task_ids(train_split)``;
      ``reset(options={"task_id": id})`` plays that game. ``task_ids(split, limit)``: the fixed
      order of a split (task types interleaved). ``task_types`` filters (1-6, names or Pick, Look,
      Clean, Heat, Cool, Pick2).
    - Observation: the engine's feedback; on reset, the intro without the TextWorld banner
      ("You are in the middle of a room... Your task is to: ..."). ``instruction``: the task text
      of the intro. ``admissible_actions``: the engine's admissible commands without ``help``.
    - Actions: a command, matched after lower-casing and collapsing spaces. One the engine does
      not admit gives its "Nothing happens." and the state unchanged (``help`` is admitted, as
      in the engine, though not listed). ``invalid_rule`` sets ``info["action_valid"]`` (which
      the invalid-action penalty follows): ``admissible`` (default) = the command was
      admissible; ``format`` = the action was a well-formed command (a non-empty string of at
      most 512 characters without control characters), admissible or not: verl-agent's rule,
      whose penalty follows only the output format.
    - Reward ``win_reward`` (10) when the task is won, else 0; the episode terminates when won
      and is truncated after ``max_steps`` (50) steps.
    - ``category``: the task type's short name, the ALFWorld paper's column name (Pick, Look,
      Clean, Heat, Cool, Pick2); ``info["task_type"]`` the full name.
    - ``state_key``: digest of the engine's true state facts (agent location, held object,
      every object's receptacle and location, open receptacles, hot/cool/clean/on/toggled/
      sliced flags): equal keys give equal ``look``/``inventory`` text and admissible commands.
    - ``milestones``: sub-goals reached so far (``found``, ``picked``, ``heated``, ...,
      ``placed``; see ``world.MILESTONES``); ``score`` = fraction reached (1 when won).
    - ``expert_action()``: ``expert="oracle"`` (default) the full-knowledge expert of
      ``oracle.py``; ``"planner"``: Fast Downward's replanner (exact; slow on big kitchens).
    """

    def __init__(
        self,
        data_dir: str | None = None,
        task_types: Any = None,
        max_steps: int = 50,
        win_reward: float = 10.0,
        train_split: str = "train",
        generated: dict[str, int] | None = None,
        generator_seed: int = 0,
        cache_dir: str | None = None,
        expert: str = "oracle",
        invalid_rule: str = "admissible",
        order: str = "interleaved",
        order_seed: int = 1234,
        render_mode: str | None = None,
    ):
        super().__init__(render_mode, max_text_length=16_384)
        if int(max_steps) < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if train_split not in SPLITS:
            raise ValueError(f"train_split must be one of {SPLITS}, got {train_split!r}")
        if expert not in EXPERTS:
            raise ValueError(f"expert must be one of {EXPERTS}, got {expert!r}")
        if invalid_rule not in INVALID_RULES:
            raise ValueError(f"invalid_rule must be one of {INVALID_RULES}, got {invalid_rule!r}")
        self.invalid_rule = invalid_rule
        self.max_steps = int(max_steps)
        self.win_reward = float(win_reward)
        self.train_split = train_split
        self.expert = expert
        self.task_types = parse_task_types(task_types)
        if data_dir is not None and str(data_dir).strip():
            self.games: OfficialGames | GeneratedGames = OfficialGames(
                data_dir, self.task_types, order, order_seed
            )
        else:
            if order != "interleaved":
                raise ValueError(
                    f"order={order!r} needs official data (data_dir); generated games are listed "
                    "interleaved"
                )
            counts = dict(DEFAULT_GENERATED if generated is None else generated)
            unknown = set(counts) - set(SPLITS)
            if unknown:
                raise ValueError(
                    f"generated: unknown split(s) {sorted(unknown)}; expected {SPLITS}"
                )
            self.games = GeneratedGames(self.task_types, counts, generator_seed, cache_dir)
        self._engine: Engine | None = None
        self._ref: GameRef | None = None
        self._task: Task | None = None
        self._statics = None
        self._names: dict[str, str] = {}
        self._reset_state()

    def _reset_state(self) -> None:
        self._gs: Any = None  # the engine's game state
        self._state = None
        self._obs = ""
        self._instruction = ""
        self._steps = 0
        self._milestones: tuple[str, ...] = ()
        self._plan: list[str] = []
        self._plan_key = ""

    # -- tasks ---------------------------------------------------------------------------------
    def task_ids(self, split: str, limit: int | None = None) -> list[str]:
        """The fixed, ordered task ids of ``split`` (``train``, ``valid_seen``, ``valid_unseen``)."""
        ids = [g.task_id for g in self.games.games(split)]
        return ids if limit is None else ids[: max(int(limit), 0)]

    def _pick(self, seed: int | None, options: dict[str, Any]) -> GameRef:
        if "task_id" in options:
            return self.games.get(str(options["task_id"]))
        games = self.games.games(self.train_split)
        if not games:
            raise ValueError(
                f"ALFWorld split {self.train_split!r} has no games for task types {self.task_types}"
            )
        if seed is None:
            seed = int(self.np_random.integers(2**31 - 1))
        return games[int(seed) % len(games)]

    # -- gymnasium API ---------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        ref = self._pick(seed, dict(options or {}))
        self._reset_state()  # a reset that fails leaves no half-started episode to step
        if self._engine is None:
            self._engine = Engine()
        if isinstance(self.games, GeneratedGames):
            ref = self.games.resolve(ref, engine=self._engine)  # may play a new game on it
        if (
            self._ref is None
            or ref.trial_dir != self._ref.trial_dir
            or self._engine.path != str(ref.game_file)
        ):
            self._ref = None  # stays unset if loading fails
            traj = read_traj(ref.traj_file)
            game = read_game(ref.game_file)
            self._engine.load(ref.game_file, game)
            self._task = Task.from_params(traj["task_type"], traj["pddl_params"])
            self._ref = ref
            self._statics = None
        self._gs = self._engine.reset()
        facts = facts_of(self._gs["_facts"])
        if self._statics is None:
            statics = read_statics(facts)
            check_task(self._task, statics, ref.traj_file)
            self._statics = statics
            self._names = self._engine.entity_names
        self._state = read_state(facts)
        intro = str(self._gs.feedback)
        self._obs = intro.replace(_BANNER, "", 1).strip()
        i = intro.find(_TASK_MARK)
        self._instruction = intro[i + len(_TASK_MARK) :].strip() if i >= 0 else ""
        self._milestones = milestones(self._task, self._statics, self._state, bool(self._gs["won"]))
        return self._obs, {**self._info(True), **fresh(TOOLS)}

    def step(self, action: str):
        if self._gs is None:
            raise RuntimeError("call reset() before step()")
        self._steps += 1
        command = (
            command_lower(_SPACES.sub(" ", action).strip()) if isinstance(action, str) else None
        )
        well_formed = bool(command) and len(command) <= _MAX_COMMAND
        well_formed = well_formed and not _CONTROL.search(command)
        if not well_formed:
            admissible, self._obs = False, NOTHING  # not a command at all: the engine is not asked
        else:
            admissible = command in self._gs["admissible_commands"]
            self._gs = self._engine.step(command)
            self._obs = str(self._gs.feedback).strip()
            if admissible:
                self._state = read_state(facts_of(self._gs["_facts"]))
                self._follow_plan(command)
        valid = admissible if self.invalid_rule == "admissible" else well_formed
        won = bool(self._gs["won"])
        self._milestones = milestones(self._task, self._statics, self._state, won, self._milestones)
        truncated = not won and self._steps >= self.max_steps
        reward = self.win_reward if won else 0.0
        return self._obs, reward, won, truncated, self._info(valid)

    def current_observation(self) -> str:
        return self._obs

    def _info(self, valid: bool) -> dict[str, Any]:
        ref, task = self._ref, self._task
        won = bool(self._gs["won"])
        total = len(MILESTONES[task.task_type])
        return make_info(
            instruction=self._instruction,
            task_id=ref.task_id,
            category=SHORT_NAMES[task.task_type],
            admissible_actions=[c for c in self._gs["admissible_commands"] if c != "help"],
            state_key=state_key(self._state),
            action_valid=valid,
            won=won,
            score=1.0 if won else len(self._milestones) / total,
            milestones=self._milestones,
            task_type=task.task_type,
            game_file=str(ref.game_file),
            steps=self._steps,
        )

    # -- expert ----------------------------------------------------------------------------------
    def expert_action(self) -> str:
        """The expert's next command (see the class docstring). Does not change the env."""
        if self._gs is None:
            raise RuntimeError("call reset() before expert_action()")
        admissible = self._gs["admissible_commands"]
        if self.expert == "oracle":
            cmd = next_command(self._task, self._statics, self._state, self._names)
            if cmd is not None and cmd in admissible:
                return cmd
        key = state_key(self._state)
        if not self._plan or self._plan_key != key:
            self._plan = self._engine.plan() if not self._gs["won"] else []
            self._plan_key = key
        if self._plan and self._plan[0] in admissible:
            return self._plan[0]
        return "look"

    def _follow_plan(self, command: str) -> None:
        """Keep the planner's plan while the agent follows it (replanned on the next call else)."""
        if self._plan and self._plan[0] == command:
            self._plan.pop(0)
            self._plan_key = state_key(self._state)

    @property
    def game_ref(self) -> GameRef | None:
        """The current game (id, split, task type, files)."""
        return self._ref

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        self._ref = None
