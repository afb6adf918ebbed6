"""``agentrl/TextWorld-v0``: any TextWorld game file (.z8/.ulx) as an agentrl text env."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..base import TextEnv, make_info
from ..cache import cache_root
from ..commands import command_lower
from ..tools import fresh, tool, tool_info
from .games import MakeSettings, expand_game_files, make_game_file
from .probe import probe_game
from .storyfile import check_story_file

__all__ = ["NOTHING", "TextWorldEnv", "command_key"]

SPLITS = ("train", "test")
#: Generated games per split when no game files are given.
DEFAULT_GENERATED = {"train": 8, "test": 4}
_TEST_SEED_OFFSET = 1_000_000
_PROMPT = re.compile(r"\n>[^\n]*$")  # Inform 7's prompt and status line after the feedback
_BANNER_LINE = re.compile(r"^[\s$|\\/_>]*$")  # lines of the ASCII-art banner
_SPACES = re.compile(r"\s+")
#: What an invalid command gets back (the wording of TextWorld's ALFWorld engine for the same case).
NOTHING = "Nothing happens."

#: TextWorld's command grammar as tools for the tool-call action format (reset info), the more
#: specific first (a command maps back to the first tool that writes it); ``command(text)``
#: takes any other command of a custom game's grammar.
TOOLS = tool_info(
    [
        tool("go", "Walk through an exit.", direction="north, south, east or west"),
        tool(
            "take_from",
            "Take an object out of or off something.",
            object="the object",
            source="where it is",
        ),
        tool("take", "Pick up an object.", object="the object"),
        tool(
            "put", "Put an object on a supporter.", object="the held object", supporter="e.g. table"
        ),
        tool(
            "insert",
            "Put an object into a container.",
            object="the held object",
            container="e.g. box",
        ),
        tool(
            "unlock",
            "Unlock a door or container with a key.",
            target="what to unlock",
            key="the key",
        ),
        tool("lock", "Lock a door or container with a key.", target="what to lock", key="the key"),
        tool("open", "Open a door or container.", target="what to open"),
        tool("close", "Close a door or container.", target="what to close"),
        tool("drop", "Drop a held object.", object="the object"),
        tool("eat", "Eat a held object.", object="the object"),
        tool("examine", "Look closely at something.", target="what to examine"),
        tool("look", "Describe the room."),
        tool("inventory", "List what you carry."),
        tool("command", "Any other command of the game.", text="the command"),
    ],
    {
        "go": "go {direction}",
        "take_from": "take {object} from {source}",
        "take": "take {object}",
        "put": "put {object} on {supporter}",
        "insert": "insert {object} into {container}",
        "unlock": "unlock {target} with {key}",
        "lock": "lock {target} with {key}",
        "open": "open {target}",
        "close": "close {target}",
        "drop": "drop {object}",
        "eat": "eat {object}",
        "examine": "examine {target}",
        "look": "look",
        "inventory": "inventory",
        "command": "{text}",
    },
)


def _default_cache_dir() -> Path:
    return cache_root("textworld")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence Jericho's warning that it cannot list valid actions of TextWorld games (it says so
    on every reset and step; TextWorld's state tracker supplies the admissible commands)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Unable to find valid actions")
        yield


def clean_feedback(text: str) -> str:
    """The game's feedback without Inform 7's prompt/status line and TextWorld's ASCII banner."""
    text = _PROMPT.sub("", str(text).rstrip())
    lines = text.split("\n")
    while lines and _BANNER_LINE.match(lines[0]):
        lines.pop(0)
    return "\n".join(lines).strip()


def command_key(action: object) -> str:
    """The text an action is matched by: whitespace runs collapsed, ends stripped, lower case
    (:func:`envs.commands.command_lower`: no look-alike letter folds onto an ASCII one).

    Not text (``None``, bytes...) gives ``""``, which matches no command. Control characters,
    NUL bytes and lone surrogates survive here but match no admissible command either, and the
    action itself never reaches the game (see :class:`TextWorldEnv`).
    """
    return command_lower(_SPACES.sub(" ", action).strip()) if isinstance(action, str) else ""


class TextWorldEnv(TextEnv):
    """TextWorld games (Côté et al., 2018) through TextWorld's own engine (Jericho + its state tracker).

    - Games: ``game_files`` (a file, directory, glob or list; each needs TextWorld's ``.json``
      next to it, which every TextWorld-made game has) form split ``train``, ``eval_game_files``
      split ``test``. Without files, games are generated offline with TextWorld's generator
      (``tw-make custom`` settings ``world_size``, ``nb_objects``, ``quest_length``) into the
      cache (``cache_dir``, default ``~/.cache/agentrl/textworld``) on first use: ``generated``
      per split (``{"train": 8, "test": 4}``), game ``k`` of ``train`` from seed
      ``generator_seed + k`` and of ``test`` from ``generator_seed + 1e6 + k``.
    - Tasks: ``reset(seed=s)`` plays training game ``s mod n``; ``reset(options={"task_id"})``
      a listed game (task ids: the file paths, or ``<split>/<k>`` for generated games).
    - Observation: the game's feedback without the prompt/status line (and, on reset, the
      banner); ``instruction``: the game's objective; ``admissible_actions``: TextWorld's.
    - Validity rule: **only admissible commands reach the game.** An action is valid when, with
      whitespace runs collapsed, ends stripped and case ignored, it equals one of the admissible
      commands; the game is then sent that admissible command (never the model's text). Any
      other action (a synonym or abbreviation the parser would accept, ``w``, ``get key``,
      ``take key.``; a meta command such as ``save``, ``script``, ``restart``, ``quit``; an
      interpreter escape starting with ``\\``; NUL bytes, control characters, lone surrogates;
      not a string) is invalid: it is not sent, the observation is "Nothing happens.", the
      reward is 0 and the state is unchanged (``action_valid=False``; the step counts towards
      ``max_steps``). This keeps the env contract "an invalid action leaves the state unchanged"
      exactly, and no model output can reach the interpreter.
    - Game files are checked before Jericho loads them (:mod:`.storyfile`: header, declared
      length, checksum) and, unless ``probe_games=False``, loaded once in a child process
      (:mod:`.probe`; verdicts cached under ``cache_dir/verified``): a truncated, junk or
      crashing file is a ``ValueError`` naming the file, never a dead process.
    - Reward: the game's score increase; terminated when won or lost, truncated after
      ``max_steps``. ``score``: points / max points; ``milestones``: ``point_1``, ``point_2``...
      for points earned. ``state_key``: digest of the true state's facts (TextWorld's state
      tracker). ``expert_action()``: the first of TextWorld's policy commands from the state.
    """

    def __init__(
        self,
        game_files: Any = None,
        eval_game_files: Any = None,
        max_steps: int = 100,
        generated: dict[str, int] | None = None,
        generator_seed: int = 0,
        world_size: int = 3,
        nb_objects: int = 6,
        quest_length: int = 3,
        cache_dir: str | None = None,
        category: str = "textworld",
        probe_games: bool = True,
        render_mode: str | None = None,
    ):
        super().__init__(render_mode, max_text_length=16_384)
        if int(max_steps) < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.max_steps = int(max_steps)
        self.category = str(category)
        self.probe_games = bool(probe_games)
        self._files: dict[str, list[Path]] = {}
        self._generated: dict[str, int] = {}
        if game_files is not None:
            self._files = {
                "train": expand_game_files(game_files),
                "test": expand_game_files(eval_game_files),
            }
            for f in self._files["train"] + self._files["test"]:
                if not f.with_suffix(".json").is_file():
                    raise FileNotFoundError(
                        f"{f}: TextWorld needs the game's metadata {f.with_suffix('.json').name} next to it "
                        "(admissible commands, state and walkthrough come from it)"
                    )
        else:
            counts = dict(DEFAULT_GENERATED if generated is None else generated)
            unknown = set(counts) - set(SPLITS)
            if unknown:
                raise ValueError(
                    f"generated: unknown split(s) {sorted(unknown)}; expected {SPLITS}"
                )
            self._generated = {s: int(counts.get(s, 0)) for s in SPLITS}
        self.settings = MakeSettings(int(world_size), int(nb_objects), int(quest_length))
        self.generator_seed = int(generator_seed)
        self.cache_dir = (
            Path(os.path.expanduser(str(cache_dir))) if cache_dir else _default_cache_dir()
        )
        self._env: Any = None
        self._loaded: str | None = None
        self._task_id = ""
        self._gs: Any = None
        self._obs = ""
        self._steps = 0

    # -- tasks ---------------------------------------------------------------------------------
    def task_ids(self, split: str, limit: int | None = None) -> list[str]:
        """``train``/``test`` game ids in a fixed order."""
        if split not in SPLITS:
            raise ValueError(f"TextWorld has splits {SPLITS}, not {split!r}")
        if self._files:
            ids = [str(f) for f in self._files[split]]
        else:
            ids = [f"{split}/{k}" for k in range(self._generated[split])]
        return ids if limit is None else ids[: max(int(limit), 0)]

    def _game_path(self, task_id: str) -> Path:
        if self._files:
            known = {str(f) for fs in self._files.values() for f in fs}
            if task_id not in known:
                raise ValueError(
                    f"unknown TextWorld task id {task_id!r}; task ids are the listed game files"
                )
            return Path(task_id)
        parts = task_id.split("/")
        if len(parts) != 2 or parts[0] not in SPLITS or not parts[1].isdigit():
            raise ValueError(
                f"bad TextWorld task id {task_id!r}: expected '<split>/<k>' (split in {SPLITS})"
            )
        if int(parts[1]) >= self._generated[parts[0]]:
            # each new id would generate and keep another game file: only the listed ones exist
            raise ValueError(
                f"unknown TextWorld task id {task_id!r}: split {parts[0]!r} has "
                f"{self._generated[parts[0]]} generated games ({parts[0]}/0 .. "
                f"{parts[0]}/{self._generated[parts[0]] - 1}; raise generated= for more)"
            )
        seed = (
            self.generator_seed + (_TEST_SEED_OFFSET if parts[0] == "test" else 0) + int(parts[1])
        )
        return make_game_file(
            self.cache_dir / f"generated-{self.settings.key()}", seed, self.settings
        )

    # -- gymnasium API ---------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        if "task_id" in options:
            task_id = str(options["task_id"])
        else:
            ids = self.task_ids("train")
            if not ids:
                raise ValueError("TextWorld-v0 has no training games")
            if seed is None:
                seed = int(self.np_random.integers(2**31 - 1))
            task_id = ids[int(seed) % len(ids)]
        path = self._game_path(task_id)
        if self._env is None or self._loaded != str(path):
            self._start(path)
        self._task_id = task_id
        with _quiet():
            self._gs = self._env.reset()
        self._steps = 0
        self._obs = clean_feedback(self._gs.feedback)
        return self._obs, {**self._info(True), **fresh(TOOLS)}

    def _start(self, path: Path) -> None:
        import textworld

        infos = textworld.EnvInfos(
            admissible_commands=True,
            won=True,
            lost=True,
            score=True,
            max_score=True,
            policy_commands=True,
            facts=True,
            objective=True,
        )
        if self._env is not None:
            self._env.close()
            self._env = None
        if path.suffix != ".ulx":  # Glulx: TextWorld refuses it in Python, naming the file
            check_story_file(path)
            if self.probe_games:
                probe_game(path, self.cache_dir)
        try:
            with _quiet():
                self._env = textworld.start(str(path), request_infos=infos)
        except Exception as exc:
            raise ValueError(
                f"{path}: TextWorld cannot load this game ({type(exc).__name__}: {exc})"
            ) from exc
        self._loaded = str(path)

    def step(self, action: str):
        if self._gs is None:
            raise RuntimeError("call reset() before step()")
        self._steps += 1
        before = int(self._gs["score"] or 0)
        canonical = {command_key(c): c for c in self._gs["admissible_commands"] or []}
        command = canonical.get(command_key(action))
        if command is None:  # not admissible: never sent to the game, nothing changes
            self._obs = NOTHING
            won, lost = bool(self._gs["won"]), bool(self._gs["lost"])
            truncated = not (won or lost) and self._steps >= self.max_steps
            return self._obs, 0.0, won or lost, truncated, self._info(False)
        with _quiet():
            self._gs, _, _ = self._env.step(command)
        self._obs = clean_feedback(self._gs.feedback)
        won, lost = bool(self._gs["won"]), bool(self._gs["lost"])
        reward = float(int(self._gs["score"] or 0) - before)
        truncated = not (won or lost) and self._steps >= self.max_steps
        return self._obs, reward, won or lost, truncated, self._info(True)

    def current_observation(self) -> str:
        return self._obs

    def _info(self, valid: bool) -> dict[str, Any]:
        gs = self._gs
        points, max_points = int(gs["score"] or 0), max(int(gs["max_score"] or 0), 1)
        facts = sorted(str(f) for f in gs["facts"] or [])
        key = hashlib.blake2b("|".join(facts).encode(), digest_size=16).hexdigest()
        return make_info(
            instruction=str(gs["objective"] or ""),
            task_id=self._task_id,
            category=self.category,
            admissible_actions=list(gs["admissible_commands"] or []),
            state_key=key,
            action_valid=valid,
            won=bool(gs["won"]),
            score=min(max(points / max_points, 0.0), 1.0),
            milestones=[f"point_{i}" for i in range(1, max(points, 0) + 1)],
            lost=bool(gs["lost"]),
            points=points,
            max_points=max_points,
            steps=self._steps,
        )

    def expert_action(self) -> str:
        """The first command of TextWorld's winning policy from the current state."""
        if self._gs is None:
            raise RuntimeError("call reset() before expert_action()")
        policy = self._gs["policy_commands"] or []
        return policy[0] if policy else "look"

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
        self._loaded = None
