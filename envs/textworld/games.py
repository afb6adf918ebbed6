"""TextWorld game files: listing the ones a user gives, and generating games offline.

Generation uses TextWorld's own generator (``textworld.generator.make_game`` and
``compile_game``, what ``tw-make custom`` runs) and its bundled Inform 7 compiler; no network.
Each generated game is written atomically (built in a temporary directory, then renamed), so
workers that ask for the same game at once agree on one copy.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["GAME_SUFFIXES", "MakeSettings", "expand_game_files", "make_game_file"]

GAME_SUFFIXES = (".z8", ".ulx")
_ATTEMPTS = 20


def expand_game_files(spec: str | os.PathLike | list | tuple | None) -> list[Path]:
    """Game files from a path, a directory (its .z8/.ulx files), a glob, or a list of these.

    Every file must exist and have a TextWorld game suffix; errors name the offending path.
    """
    if spec is None:
        return []
    items = [spec] if isinstance(spec, (str, os.PathLike)) else list(spec)
    files: list[Path] = []
    for item in items:
        path = Path(os.path.expandvars(os.path.expanduser(str(item))))
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix in GAME_SUFFIXES)
            if not found:
                raise FileNotFoundError(f"{path}: directory holds no TextWorld game (.z8/.ulx)")
            files += found
        elif any(ch in str(item) for ch in "*?["):
            found = sorted(Path(p) for p in glob.glob(str(path)) if Path(p).suffix in GAME_SUFFIXES)
            if not found:
                raise FileNotFoundError(f"{item}: pattern matches no TextWorld game (.z8/.ulx)")
            files += found
        elif not path.is_file():
            raise FileNotFoundError(f"{path}: TextWorld game file not found")
        elif path.suffix not in GAME_SUFFIXES:
            raise ValueError(f"{path}: not a TextWorld game file (expected {GAME_SUFFIXES})")
        else:
            files.append(path)
    return files


@dataclass(frozen=True)
class MakeSettings:
    """Settings of ``tw-make custom`` games (rooms, objects, quest length in actions)."""

    world_size: int = 3
    nb_objects: int = 6
    quest_length: int = 3

    def key(self) -> str:
        return f"w{self.world_size}-o{self.nb_objects}-q{self.quest_length}"


def make_game_file(out_dir: str | Path, seed: int, settings: MakeSettings = MakeSettings()) -> Path:
    """Generate (once) TextWorld game ``seed`` under ``out_dir``; returns its ``.z8`` path."""
    import textworld
    from textworld.generator import compile_game, make_game
    from textworld.generator.chaining import QuestGenerationError

    out_dir = Path(out_dir)
    name = f"tw-{settings.key()}-s{seed}"
    final = out_dir / name / f"{name}.z8"
    if final.is_file() and final.with_suffix(".json").is_file():
        return final
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=out_dir))
    try:
        options = textworld.GameOptions()
        options.nb_rooms = int(settings.world_size)
        options.nb_objects = int(settings.nb_objects)
        options.quest_length = int(settings.quest_length)
        options.path = str(tmp / f"{name}.z8")
        options.force_recompile = True
        game = None
        for attempt in range(_ATTEMPTS):  # some worlds admit no quest of the asked length
            options.seeds = int(seed) * _ATTEMPTS + attempt
            try:
                game = make_game(options)
                break
            except QuestGenerationError:
                continue
        if game is None:
            raise RuntimeError(f"TextWorld found no quest for {settings} (seed {seed})")
        compile_game(game, options)
        with contextlib.suppress(OSError):  # made meanwhile by another process: keep theirs
            os.rename(tmp, final.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not final.is_file():
        raise RuntimeError(f"TextWorld did not produce {final}")
    return final
