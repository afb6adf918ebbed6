"""Where ALFWorld games come from: the official data layout, or generated games in a cache.

Official layout (``alfworld-download``, or ``python -m agentrl.envs.alfworld.generate``)::

    DATA/json_2.1.1/{train,valid_seen,valid_unseen}/<task_type>-<Obj>-<Mrecep>-<Recep>-<scene>/
        <trial>/traj_data.json + game.tw-pddl

:class:`OfficialGames` lists a split the way alfworld's ``AlfredTWEnv.collect_game_files`` does
(directories holding ``traj_data.json`` next to a ``game.tw-pddl`` marked solvable; movable and
sliced tasks skipped; the task-type filter applied), but in a fixed, listed order: task types
interleaved (Pick, Look, Clean, Heat, Cool, Pick2, Pick, ...), each type in path order, so any
prefix of a split is balanced across task types. Task ids are the trial paths relative to
``json_2.1.1`` (``valid_seen/pick_heat_then_place_in_recep-Apple-None-Fridge-7/trial_T2019...``).

:class:`GeneratedGames` serves generated games from a cache directory, generating each game the
first time it is asked for (deterministic for the seed, so concurrent workers agree); task ids are
``<split>/<task_type>/<k>``.
"""

from __future__ import annotations

import operator
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..cache import cache_root
from .engine import Engine, GameFileError, read_json
from .generate import GENERATOR_VERSION, JSON_DIR, Generator, find_trial
from .splits import official_counts
from .tasks import SPLITS, TASK_TYPES

__all__ = [
    "DATA_HINT",
    "GameRef",
    "GeneratedGames",
    "OfficialGames",
    "default_cache_dir",
    "find_json_root",
    "read_traj",
]

DATA_HINT = (
    "Get the official games with `alfworld-download` (needs internet; they land in $ALFWORLD_DATA, "
    "default ~/.cache/alfworld) and pass data_dir=$ALFWORLD_DATA, or generate games offline with "
    "`python -m agentrl.envs.alfworld.generate --out DIR --per-type N` and pass data_dir=DIR, or leave "
    "data_dir unset to use generated games from the cache."
)
_SOLVABLE = re.compile(r'"solvable"\s*:\s*(true|false|null)')
_TYPE_NAME = re.compile(r"[A-Za-z]{0,64}")
#: Orders of an official split: ``interleaved`` (ours) or ``alfworld`` (AlfredTWEnv's).
ORDERS = ("interleaved", "alfworld")


def default_cache_dir() -> Path:
    """``alfworld`` under the agentrl cache (``agentrl.envs.cache.cache_root``)."""
    return cache_root("alfworld")


@dataclass(frozen=True)
class GameRef:
    """One game: its id, split, task type and files."""

    task_id: str
    split: str
    task_type: str
    trial_dir: Path

    @property
    def game_file(self) -> Path:
        return self.trial_dir / "game.tw-pddl"

    @property
    def traj_file(self) -> Path:
        return self.trial_dir / "traj_data.json"


def read_traj(path: Path) -> dict[str, Any]:
    """Read and check ``traj_data.json`` (task type and ``pddl_params``); errors name the file."""
    data = read_json(path, "traj_data.json")
    if not isinstance(data, dict) or data.get("task_type") not in TASK_TYPES.values():
        got = data.get("task_type") if isinstance(data, dict) else type(data).__name__
        raise GameFileError(
            f"{path}: 'task_type' must be one of {list(TASK_TYPES.values())}, got {got!r}"
        )
    params = data.get("pddl_params")
    if not isinstance(params, dict):
        raise GameFileError(f"{path}: missing 'pddl_params' (object_target, parent_target, ...)")
    needed = ["object_target"]
    needed.append(
        "toggle_target" if data["task_type"] == "look_at_obj_in_light" else "parent_target"
    )
    for key in ("object_target", "parent_target", "toggle_target", "mrecep_target"):
        value = params.get(key, "")
        if value is None:
            value = ""
        if not isinstance(value, str) or not _TYPE_NAME.fullmatch(value):
            raise GameFileError(
                f"{path}: pddl_params[{key!r}] must be an object type name (letters), got {value!r}"
            )
        if key in needed and not value:
            raise GameFileError(
                f"{path}: pddl_params[{key!r}] is empty; a {data['task_type']} task needs it"
            )
    return data


def find_json_root(data_dir: str | Path) -> Path:
    """The ``json_2.1.1`` directory under ``data_dir`` (or ``data_dir`` itself if it holds splits)."""
    d = Path(os.path.expandvars(os.path.expanduser(str(data_dir))))
    if not d.is_dir():
        raise FileNotFoundError(f"ALFWorld data directory {d} does not exist. {DATA_HINT}")
    for cand in (d / JSON_DIR, d):
        if any((cand / s).is_dir() for s in SPLITS):
            return cand
    raise FileNotFoundError(
        f"{d} holds no ALFWorld games (expected {JSON_DIR}/{{train,valid_seen,valid_unseen}}/ "
        f"inside it). {DATA_HINT}"
    )


def _interleave(by_type: dict[str, list[Any]], types: tuple[str, ...]) -> list[Any]:
    out, i = [], 0
    lists = [by_type.get(t, []) for t in types]
    while any(i < len(x) for x in lists):
        out += [x[i] for x in lists if i < len(x)]
        i += 1
    return out


def _unplayable(game: Path) -> str:
    """Why ``AlfredTWEnv.collect_game_files`` would skip this game file ("" if it would not).

    Its rule: the file exists, has a ``solvable`` key, and the key is true. Read as bytes and
    searched for the key (without parsing the whole file); junk never reaches the JSON parser.
    """
    try:
        head = game.read_bytes()
    except FileNotFoundError:
        return "no game.tw-pddl"
    except OSError as exc:
        return f"game.tw-pddl unreadable ({exc})"
    m = _SOLVABLE.search(head.decode("utf-8", errors="replace"))
    if m is None:
        return "game.tw-pddl has no 'solvable' key"
    if m.group(1) != "true":
        return f"solvable={m.group(1)}"
    return ""


def _task_type_of(trial: Path) -> str | None:
    prefix = trial.parent.name.split("-", 1)[0]
    return prefix if prefix in TASK_TYPES.values() else None


class OfficialGames:
    """Games in the official layout under ``data_dir`` (see the module docstring).

    ``order="alfworld"`` lists a split as alfworld's ``AlfredTWEnv`` plays it: the trials in
    ``os.walk(topdown=False)`` order (the file system's), then shuffled by TextWorld's gym env
    (``numpy.random.RandomState(order_seed).shuffle``; TextWorld seeds it with 1234 unless
    ``env.seed`` is called). ``skipped[split]``: the trials left out and why.
    """

    def __init__(
        self,
        data_dir: str | Path,
        task_types: tuple[str, ...],
        order: str = "interleaved",
        order_seed: int = 1234,
    ):
        if order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
        self.root = find_json_root(data_dir)
        self.task_types = task_types
        self.order = order
        self.order_seed = int(order_seed)
        self._lists: dict[str, list[GameRef]] = {}
        self.skipped: dict[str, list[str]] = {}

    def games(self, split: str) -> list[GameRef]:
        if split not in SPLITS:
            raise ValueError(f"unknown ALFWorld split {split!r}; expected one of {SPLITS}")
        if split not in self._lists:
            self._lists[split] = self._scan(split)
        return self._lists[split]

    def _trials(self, split_dir: Path) -> list[Path]:
        if self.order == "alfworld":
            return [
                Path(root)
                for root, _, files in os.walk(split_dir, topdown=False)
                if "traj_data.json" in files
            ]
        return sorted(t.parent for t in split_dir.rglob("traj_data.json"))

    def _scan(self, split: str) -> list[GameRef]:
        split_dir = self.root / split
        if not split_dir.is_dir():
            raise FileNotFoundError(
                f"split {split!r} missing: {split_dir} is not a directory. {DATA_HINT}"
            )
        by_type: dict[str, list[GameRef]] = {}
        listed: list[GameRef] = []
        skipped: list[str] = []
        for trial in self._trials(split_dir):
            rel = trial.relative_to(self.root).as_posix()
            if "movable" in rel or "Sliced" in rel:
                continue  # alfworld skips these too
            try:
                task_type = _task_type_of(trial) or read_traj(trial / "traj_data.json")["task_type"]
            except GameFileError as exc:
                skipped.append(f"{rel}: {exc}")
                continue
            if task_type not in self.task_types:
                continue
            game = trial / "game.tw-pddl"
            reason = _unplayable(game)
            if reason:
                skipped.append(f"{rel}: {reason}")
                continue
            ref = GameRef(rel, split, task_type, trial)
            by_type.setdefault(task_type, []).append(ref)
            listed.append(ref)
        self.skipped[split] = skipped
        if skipped:
            print(
                f"ALFWorld: skipped {len(skipped)} trial(s) of {split_dir} (no game file, not "
                f"marked solvable, or unreadable); see env.games.skipped[{split!r}]. First: "
                f"{skipped[0]}",
                file=sys.stderr,
            )
        if self.order == "alfworld":
            np.random.RandomState(self.order_seed).shuffle(listed)
            return listed
        return _interleave(by_type, self.task_types)

    def get(self, task_id: str) -> GameRef:
        """The game of ``task_id`` (a trial path relative to json_2.1.1)."""
        rel = Path(str(task_id))
        if (
            rel.is_absolute()
            or ".." in rel.parts
            or len(rel.parts) < 2
            or rel.parts[0] not in SPLITS
        ):
            raise ValueError(
                f"bad ALFWorld task id {task_id!r}: expected '<split>/<task dir>/<trial>'"
            )
        trial = self.root / rel
        if not (trial / "traj_data.json").is_file():
            raise GameFileError(f"{trial}: no traj_data.json (task id {task_id!r})")
        task_type = _task_type_of(trial) or read_traj(trial / "traj_data.json")["task_type"]
        return GameRef(rel.as_posix(), rel.parts[0], task_type, trial)


class GeneratedGames:
    """Generated games, made on first use and cached (see the module docstring)."""

    def __init__(
        self,
        task_types: tuple[str, ...],
        per_type: dict[str, int],
        seed: int = 0,
        cache_dir: str | Path | None = None,
        max_plan_steps: int = 30,
    ):
        base = (
            Path(os.path.expandvars(str(cache_dir))).expanduser()
            if cache_dir
            else default_cache_dir()
        )
        self.out = base / f"generated-v{GENERATOR_VERSION}-seed{seed}-plan{max_plan_steps}"
        self.root = self.out / JSON_DIR
        self.task_types = task_types
        self.per_type: dict[str, dict[str, int]] = {}
        for s in SPLITS:
            n = per_type.get(s, 0)
            if n == "official":
                counts = official_counts(s)
                self.per_type[s] = {t: counts[t] for t in task_types}
                continue
            try:
                ok = not isinstance(n, bool) and operator.index(n) >= 0
            except TypeError:
                ok = False
            if not ok:
                raise ValueError(
                    f"generated[{s!r}] must be an integer >= 0 (games per task type) or "
                    f"'official' (the released split's counts), got {n!r}"
                )
            self.per_type[s] = dict.fromkeys(task_types, operator.index(n))
        self.seed = int(seed)
        self.max_plan_steps = int(max_plan_steps)
        self._made: dict[str, list[float]] = {}  # split -> seconds per game made in this process
        self._missing: dict[str, int] = {}  # split -> games not in the cache when first asked

    def games(self, split: str) -> list[GameRef]:
        if split not in SPLITS:
            raise ValueError(f"unknown ALFWorld split {split!r}; expected one of {SPLITS}")
        n = self.per_type[split]
        by_type = {t: [self._ref(split, t, k) for k in range(n[t])] for t in self.task_types}
        return _interleave(by_type, self.task_types)

    def _ref(self, split: str, task_type: str, k: int) -> GameRef:
        # The trial dir is resolved (and generated if needed) only when the game is loaded.
        return GameRef(f"{split}/{task_type}/{k}", split, task_type, Path())

    def get(self, task_id: str) -> GameRef:
        parts = str(task_id).split("/")
        ok = (
            len(parts) == 3
            and parts[0] in SPLITS
            and parts[1] in self.task_types
            and parts[2].isdigit()
        )
        if not ok:
            raise ValueError(
                f"bad generated ALFWorld task id {task_id!r}: expected '<split>/<task_type>/<k>' with "
                f"split in {SPLITS} and task type in {list(self.task_types)}"
            )
        return self._ref(parts[0], parts[1], int(parts[2]))

    def resolve(self, ref: GameRef, engine: Engine | None = None) -> GameRef:
        """The game's trial directory, generating the game first if it is not in the cache.

        ``engine``: play the new game on this engine (the env's), whose translation memory then
        already holds the game when the env loads it.
        """
        split, task_type, k = ref.split, ref.task_type, int(ref.task_id.rsplit("/", 1)[1])
        trial = find_trial(self.root / split, task_type, self.seed, k)
        if trial is None:
            self._announce(split)
            t0 = time.perf_counter()
            gen = Generator(self.max_plan_steps, engine=engine)
            try:
                spec, plan = gen.make(task_type, split, self.seed, k)
                trial = gen.write(spec, plan, self.root / split, self.seed, k, split)
            finally:
                gen.close()
            self._progress(split, ref.task_id, time.perf_counter() - t0)
        return GameRef(ref.task_id, split, task_type, trial)

    def _announce(self, split: str) -> None:
        """The first time a split needs games: how many, where, and how to avoid the wait."""
        if split in self._missing:
            return
        n = self.per_type[split]
        cached = sum(
            find_trial(self.root / split, t, self.seed, k) is not None
            for t in self.task_types
            for k in range(n[t])
        )
        self._missing[split] = sum(n.values()) - cached
        print(
            f"ALFWorld: {self._missing[split]} of the {sum(n.values())} generated {split} games are "
            f"not in the cache ({self.out}); each is made the first time it is played (seconds "
            f"each), then kept. To skip the wait, generate them ahead with `python -m "
            f"agentrl.envs.alfworld.generate --out DIR --per-type N --splits {split}` and pass "
            f"env.kwargs.data_dir=DIR, or point data_dir at the official data (docs/envs/alfworld.md).",
            file=sys.stderr,
        )

    def _progress(self, split: str, task_id: str, seconds: float) -> None:
        """One line per game made: ``[k/N]``, its time, and the time left at the mean rate."""
        made = self._made.setdefault(split, [])
        made.append(seconds)
        total = max(self._missing.get(split, 0), len(made))
        left = (total - len(made)) * sum(made) / len(made)
        eta = f", about {left / 60:.1f} min left for this split" if left > 0 else ""
        print(
            f"ALFWorld: [{len(made)}/{total}] made {task_id} in {seconds:.1f} s{eta}",
            file=sys.stderr,
        )
