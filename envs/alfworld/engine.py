"""The real ALFWorld text engine: TextWorld's PDDL environment with alfworld's name demangler.

This module is the only place that touches ``textworld``/``alfworld``/``fast_downward``
internals. It adds three things the raw engine lacks:

- game files are checked before they reach the engine, and every failure (missing file, bad
  JSON, missing keys, unsolvable, PDDL the translator rejects) becomes a :class:`GameFileError`
  naming the file and the problem;
- Fast Downward's translator rewrites ``sys.argv`` on every game load (a hack in
  ``fast_downward.interface.pddl2sas``); we restore it, so argument parsers (Hydra, argparse)
  running later in the same process are not broken;
- each engine remembers the Fast Downward translations (PDDL -> SAS) of its current game, so
  replaying a game (``reset``) does not translate it again: ``PddlEnv`` translates the problem
  twice on ``load`` and twice more on every ``reset``, the dominant cost of a reset;
- :meth:`Engine.plan` exposes the planner (Fast Downward on the current state), the expert the
  ALFWorld authors call ``planner``.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["Engine", "GameFileError", "import_engine", "read_game", "read_json"]

_INSTALL_HINT = (
    "ALFWorld needs the alfworld package: pip install 'agentrl[alfworld]' (alfworld==0.4.2)"
)
_REQUIRED_KEYS = ("pddl_domain", "grammar", "pddl_problem")


class GameFileError(ValueError):
    """A game file that cannot be played: the message names the file and what is wrong."""


def import_engine() -> Any:
    """Import the engine modules lazily (``envs`` must import without alfworld installed)."""
    try:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
        from textworld.envs import PddlEnv
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(f"{_INSTALL_HINT} ({exc})") from exc
    return textworld, PddlEnv, AlfredDemangler


@contextlib.contextmanager
def keep_argv() -> Iterator[None]:
    """Restore ``sys.argv`` after Fast Downward's translator overwrote it."""
    saved = list(sys.argv)
    try:
        yield
    finally:
        sys.argv[:] = saved


def read_json(path: Path, what: str) -> Any:
    """Parse a JSON file; every failure is a :class:`GameFileError` naming the file.

    Covers: missing, unreadable (a directory, no permission), not UTF-8 (binary junk), not JSON,
    and JSON nested too deeply for the parser (``RecursionError``).
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise GameFileError(f"{path}: {what} not found") from None
    except OSError as exc:
        raise GameFileError(f"{path}: cannot read {what} ({exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GameFileError(f"{path}: {what} is not UTF-8 text ({exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise GameFileError(f"{path}: {what} is not valid JSON ({exc})") from None
    except RecursionError:
        raise GameFileError(f"{path}: {what} is nested too deeply") from None


def read_game(path: str | Path, *, require_solvable: bool = True) -> dict[str, Any]:
    """Read and check a ``game.tw-pddl`` file (JSON with the PDDL domain, problem and grammar).

    Raises :class:`GameFileError` naming ``path`` when the file is missing, is not JSON, lacks
    a key, or (with ``require_solvable``) is not marked solvable.
    """
    path = Path(path)
    data = read_json(path, "game file")
    if not isinstance(data, dict):
        raise GameFileError(f"{path}: expected a JSON object, got {type(data).__name__}")
    missing = [k for k in _REQUIRED_KEYS if not isinstance(data.get(k), str) or not data[k].strip()]
    if missing:
        raise GameFileError(f"{path}: missing or empty key(s) {missing}")
    if require_solvable and data.get("solvable") is not True:
        state = (
            "marked unsolvable" if data.get("solvable") is False else "not checked for solvability"
        )
        raise GameFileError(f"{path}: game {state} (key 'solvable' is {data.get('solvable')!r})")
    return data


class Engine:
    """One ALFWorld game engine: ``PddlEnv`` wrapped in alfworld's ``AlfredDemangler``.

    Each instance holds its own copy of Fast Downward's library (that is how ``PddlEnv`` keeps
    games in one process apart); :meth:`close` frees the game state in it.
    """

    #: Translations kept per engine (two per game: plain and optimised for replanning).
    TRANSLATIONS_KEPT = 4

    def __init__(self) -> None:
        textworld, PddlEnv, AlfredDemangler = import_engine()
        infos = textworld.EnvInfos(admissible_commands=True, won=True)
        self._pddl = PddlEnv(infos)
        self._env = AlfredDemangler(self._pddl, shuffle=False)
        self.path: str | None = None
        self.data: dict[str, Any] | None = None
        self._translations: OrderedDict[tuple, Any] = OrderedDict()

    @contextlib.contextmanager
    def _calling_engine(self) -> Iterator[None]:
        """Scope of one engine call: translations served from this engine's memory, and
        ``sys.argv`` restored. ``fast_downward.pddl2sas`` is swapped only for the call."""
        import fast_downward

        original = fast_downward.pddl2sas
        memory = self._translations

        def translate(domain: str, problem: str, verbose: bool = False, optimize: bool = False):
            key = (domain, problem, bool(optimize))
            if key in memory:
                memory.move_to_end(key)
                return memory[key]
            result = original(domain, problem, verbose=verbose, optimize=optimize)
            memory[key] = result
            while len(memory) > self.TRANSLATIONS_KEPT:
                memory.popitem(last=False)
            return result

        fast_downward.pddl2sas = translate
        try:
            with keep_argv():
                yield
        finally:
            fast_downward.pddl2sas = original

    def load(self, path: str | Path, data: Mapping[str, Any] | None = None) -> None:
        """Load a game (``data`` = its parsed JSON if already read). Errors name the file."""
        data = dict(data) if data is not None else read_game(path)
        try:
            with self._calling_engine():
                self._env.load(data)
        except (Exception, SystemExit) as exc:  # the translator calls sys.exit on bad PDDL
            what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise GameFileError(f"{path}: the PDDL engine rejected the game ({what})") from None
        self.path, self.data = str(path), data

    def reset(self) -> Any:
        """Start the loaded game; returns TextWorld's game state (``feedback``, facts, ...)."""
        try:
            with self._calling_engine():
                return self._env.reset()
        except (Exception, SystemExit) as exc:  # e.g. a grammar TextWorld cannot parse
            what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise GameFileError(f"{self.path}: the engine cannot start the game ({what})") from None

    def step(self, command: str) -> Any:
        """Apply ``command``; an inadmissible one gives "Nothing happens." and no change."""
        state, _, _ = self._env.step(command)
        return state

    @property
    def entity_names(self) -> dict[str, str]:
        """PDDL entity id -> the name shown to the agent (``"apple 1"``)."""
        return {k: info.name for k, info in self._pddl._entity_infos.items()}

    def plan(self) -> list[str]:
        """Commands of a Fast Downward plan from the current state to the goal ([] if none)."""
        with keep_argv():
            return list(self._pddl._pddl_state.replan(self._pddl._entity_infos))

    def close(self) -> None:
        """Free the game's planner state. The library copy stays mapped until the process
        exits: unloading copies (``fast_downward.close_lib``) made later loads of a new copy
        segfault in ``dlopen`` (observed here in 4 of 5 runs), so it is never unloaded."""
        lib = getattr(self._pddl, "downward_lib", None)
        if lib is not None:
            with contextlib.suppress(Exception):
                lib.cleanup()
        self.path = self.data = None
        self._translations.clear()
