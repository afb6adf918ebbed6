"""ALFWorld pieces that need no engine: task types, true-state reading, state keys, milestones,
the full-knowledge expert (on hand-built states), data-directory and game-file errors."""

from __future__ import annotations

import json

import pytest
from agentrl.envs.alfworld.data import _interleave, find_json_root, read_traj
from agentrl.envs.alfworld.engine import GameFileError, read_game
from agentrl.envs.alfworld.oracle import next_command, plan
from agentrl.envs.alfworld.tasks import SHORT_NAMES, TASK_TYPES, parse_task_types
from agentrl.envs.alfworld.world import (
    MILESTONES,
    Task,
    goal_met,
    milestones,
    read_state,
    read_statics,
    state_key,
)
from hypothesis import given, settings
from hypothesis import strategies as st

# -- task types ------------------------------------------------------------------------------


def test_parse_task_types_accepts_numbers_names_and_short_names():
    assert parse_task_types(None) == tuple(TASK_TYPES.values())
    assert parse_task_types([4, "Pick", "look_at_obj_in_light", "pick2"]) == (
        "pick_and_place_simple",
        "look_at_obj_in_light",
        "pick_heat_then_place_in_recep",
        "pick_two_obj_and_place",
    )
    assert parse_task_types("3") == ("pick_clean_then_place_in_recep",)
    assert set(SHORT_NAMES.values()) == {"Pick", "Look", "Clean", "Heat", "Cool", "Pick2"}


@pytest.mark.parametrize("bad", [[7], ["boil"], [], [True]])
def test_parse_task_types_rejects_unknown(bad):
    with pytest.raises(ValueError):
        parse_task_types(bad)


# -- a hand-built world: a kitchen with a fridge (egg inside), microwave, countertop, cabinet ----
STATIC = [
    ("objecttype", "egg_1", "eggtype"),
    ("objecttype", "mug_1", "mugtype"),
    ("receptacletype", "fridge_1", "fridgetype"),
    ("receptacletype", "microwave_1", "microwavetype"),
    ("receptacletype", "countertop_1", "countertoptype"),
    ("receptacletype", "cabinet_1", "cabinettype"),
    ("receptacleatlocation", "fridge_1", "loc_f"),
    ("receptacleatlocation", "microwave_1", "loc_m"),
    ("receptacleatlocation", "countertop_1", "loc_c"),
    ("receptacleatlocation", "cabinet_1", "loc_k"),
    ("openable", "fridge_1"),
    ("openable", "microwave_1"),
    ("openable", "cabinet_1"),
    ("cancontain", "countertoptype", "eggtype"),
    ("cancontain", "fridgetype", "eggtype"),
    ("cancontain", "cabinettype", "mugtype"),
    ("cancontain", "countertoptype", "mugtype"),
]
NAMES = {
    "egg_1": "egg 1",
    "mug_1": "mug 1",
    "fridge_1": "fridge 1",
    "microwave_1": "microwave 1",
    "countertop_1": "countertop 1",
    "cabinet_1": "cabinet 1",
}
RLOC = {r: loc for _, r, loc in (f for f in STATIC if f[0] == "receptacleatlocation")}
STATIC_EXTRA = [("receptacleatlocation", "desk_1", "loc_d")]


def apply(dynamic: set, command: str, names: dict[str, str]) -> set:
    """A tiny simulator of the domain's effects for the commands the expert emits."""
    by_name = {v: k for k, v in names.items()}
    rloc = {
        r: loc
        for _, r, loc in (f for f in dynamic | set(STATIC_EXTRA) if f[0] == "receptacleatlocation")
    }
    rloc.update(RLOC)
    d = set(dynamic)
    words = command.split()
    if command.startswith("go to "):
        d = {f for f in d if f[0] != "atlocation"} | {
            ("atlocation", "agent1", rloc[by_name[command[6:]]])
        }
    elif words[0] == "open":
        d.add(("opened", by_name[" ".join(words[1:])]))
    elif words[0] == "take":
        o, r = by_name[" ".join(words[1:3])], by_name[" ".join(words[4:6])]
        d -= {("inreceptacle", o, r)}
        d |= {("holds", "agent1", o), ("holdsany", "agent1")}
    elif words[0] == "move":
        o, r = by_name[" ".join(words[1:3])], by_name[" ".join(words[4:6])]
        d -= {("holds", "agent1", o), ("holdsany", "agent1")}
        d.add(("inreceptacle", o, r))
    elif words[0] in ("heat", "cool", "clean"):
        o = by_name[" ".join(words[1:3])]
        d.add(({"heat": "ishot", "cool": "iscool", "clean": "isclean"}[words[0]], o))
    elif words[0] == "use":
        d.add(("istoggled", by_name[" ".join(words[1:3])]))
    else:
        raise AssertionError(command)
    return d


def run_expert(task: Task, dynamic: set, statics=STATIC, names=NAMES, limit: int = 20):
    st_ = read_statics(statics)
    commands, ms, scores = [], (), []
    for _ in range(limit):
        s = read_state(sorted(dynamic))
        if goal_met(task, st_, s):
            break
        cmd = next_command(task, st_, s, names)
        assert cmd is not None
        commands.append(cmd)
        dynamic = apply(dynamic, cmd, names)
        s = read_state(sorted(dynamic))
        won = goal_met(task, st_, s)
        ms = milestones(task, st_, s, won, ms)
        scores.append(1.0 if won else len(ms) / len(MILESTONES[task.task_type]))
    return commands, ms, scores


START = {
    ("atlocation", "agent1", "loc_start"),
    ("inreceptacle", "egg_1", "fridge_1"),
    ("inreceptacle", "mug_1", "countertop_1"),
}


def test_expert_heat_task_hand_computed():
    task = Task("pick_heat_then_place_in_recep", "egg", "countertop", "")
    commands, ms, scores = run_expert(task, set(START))
    assert commands == [
        "go to fridge 1",
        "open fridge 1",
        "take egg 1 from fridge 1",
        "go to microwave 1",
        "heat egg 1 with microwave 1",
        "go to countertop 1",
        "move egg 1 to countertop 1",
    ]
    assert ms == ("found", "picked", "heated", "placed")
    # found once the fridge is open; picked; heated; placed = won
    assert scores == [0.0, 0.25, 0.5, 0.5, 0.75, 0.75, 1.0]


def test_expert_puts_away_a_wrong_object_first():
    task = Task("pick_cool_then_place_in_recep", "egg", "countertop", "")
    start = {
        ("atlocation", "agent1", "loc_c"),
        ("holds", "agent1", "mug_1"),
        ("inreceptacle", "egg_1", "fridge_1"),
    }
    commands, ms, _ = run_expert(task, start)
    assert commands[0] == "move mug 1 to countertop 1"  # allowed here, no walking needed
    assert commands[-1] == "move egg 1 to countertop 1"
    assert "cool egg 1 with fridge 1" in commands
    assert ms == ("found", "picked", "cooled", "placed")


def test_expert_pick_two_uses_one_receptacle():
    statics = STATIC + [("objecttype", "egg_2", "eggtype")]
    names = {**NAMES, "egg_2": "egg 2"}
    task = Task("pick_two_obj_and_place", "egg", "countertop", "")
    start = set(START) | {("inreceptacle", "egg_2", "microwave_1")}
    commands, ms, _ = run_expert(task, start, statics, names)
    assert commands == [
        "go to fridge 1",
        "open fridge 1",
        "take egg 1 from fridge 1",
        "go to countertop 1",
        "move egg 1 to countertop 1",
        "go to microwave 1",
        "open microwave 1",
        "take egg 2 from microwave 1",
        "go to countertop 1",
        "move egg 2 to countertop 1",
    ]
    assert ms == ("found", "picked", "placed_1", "picked_2", "placed_2")


def test_expert_look_task():
    statics = STATIC + [
        ("objecttype", "lamp_1", "desklamptype"),
        ("receptacletype", "desk_1", "desktype"),
        ("receptacleatlocation", "desk_1", "loc_d"),
    ]
    names = {**NAMES, "lamp_1": "desklamp 1", "desk_1": "desk 1"}
    task = Task("look_at_obj_in_light", "mug", "", "desklamp")
    start = set(START) | {("inreceptacle", "lamp_1", "desk_1")}
    commands, ms, scores = run_expert(task, start, statics, names)
    assert commands == [
        "go to countertop 1",
        "take mug 1 from countertop 1",
        "go to desk 1",
        "use desklamp 1",
    ]
    assert ms == ("found", "picked", "lamp_on", "looked")
    assert scores[-1] == 1.0


# -- state keys --------------------------------------------------------------------------------
def test_state_key_ignores_bookkeeping_and_fact_order():
    facts = sorted(START)
    base = state_key(read_state(facts))
    assert state_key(read_state(list(reversed(facts)))) == base
    assert state_key(read_state(facts + [("checked", "fridge_1"), ("examined", "loc_f")])) == base
    assert state_key(read_state(facts + [("opened", "fridge_1")])) != base
    assert state_key(read_state(facts + [("ishot", "egg_1")])) != base
    moved = [f for f in facts if f[0] != "atlocation"] + [("atlocation", "agent1", "loc_f")]
    assert state_key(read_state(moved)) != base


@given(st.permutations(sorted(START | {("opened", "fridge_1"), ("isclean", "mug_1")})))
def test_state_key_is_order_free(facts):
    assert state_key(read_state(facts)) == state_key(
        read_state(sorted(START | {("opened", "fridge_1"), ("isclean", "mug_1")}))
    )


def test_milestones_keep_first_reached_order_and_are_never_lost():
    task = Task("pick_and_place_simple", "egg", "countertop", "")
    st_ = read_statics(STATIC)
    holding = read_state([("atlocation", "agent1", "loc_f"), ("holds", "agent1", "egg_1")])
    ms = milestones(task, st_, holding, False)
    assert ms == ("found", "picked")
    dropped_elsewhere = read_state(
        [("atlocation", "agent1", "loc_m"), ("inreceptacle", "egg_1", "fridge_1")]
    )
    assert milestones(task, st_, dropped_elsewhere, False, ms) == ms


# -- data and game-file errors -------------------------------------------------------------------
def test_missing_data_dir_says_how_to_get_data(tmp_path):
    with pytest.raises(FileNotFoundError, match="alfworld-download") as err:
        find_json_root(tmp_path / "nope")
    assert "agentrl.envs.alfworld.generate" in str(err.value)
    with pytest.raises(FileNotFoundError, match="no ALFWorld games"):
        find_json_root(tmp_path)


def test_find_json_root_accepts_both_levels(tmp_path):
    (tmp_path / "json_2.1.1" / "valid_seen").mkdir(parents=True)
    assert find_json_root(tmp_path) == tmp_path / "json_2.1.1"
    assert find_json_root(tmp_path / "json_2.1.1") == tmp_path / "json_2.1.1"


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "game file not found"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({"pddl_domain": "d", "grammar": "g"}), "missing or empty key"),
        (
            json.dumps(
                {"pddl_domain": "d", "grammar": "g", "pddl_problem": "p", "solvable": False}
            ),
            "unsolvable",
        ),
        (json.dumps({"pddl_domain": "d", "grammar": "g", "pddl_problem": "p"}), "not checked"),
    ],
)
def test_read_game_errors_name_the_file(tmp_path, content, message):
    path = tmp_path / "game.tw-pddl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(GameFileError, match=message) as err:
        read_game(path)
    assert str(path) in str(err.value)


def test_read_traj_errors(tmp_path):
    path = tmp_path / "traj_data.json"
    path.write_text("{}")
    with pytest.raises(GameFileError, match="task_type"):
        read_traj(path)
    path.write_text(json.dumps({"task_type": "pick_and_place_simple"}))
    with pytest.raises(GameFileError, match="pddl_params"):
        read_traj(path)


def test_interleave_balances_task_types():
    got = _interleave({"a": [1, 2, 3], "b": [10], "c": [20, 21]}, ("a", "b", "c"))
    assert got == [1, 10, 20, 2, 21, 3]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"generated": {"train": "x"}}, "integer >= 0"),
        ({"generated": {"train": -1}}, "integer >= 0"),
        ({"generated": {"test": 5}}, "unknown split"),
        ({"max_steps": 0}, "max_steps"),
        ({"train_split": "dev"}, "train_split"),
        ({"expert": "psychic"}, "expert"),
        ({"task_types": ["Boil"]}, "unknown ALFWorld task type"),
    ],
)
def test_bad_config_values_are_named(kwargs, message, tmp_path):
    from agentrl.envs.alfworld import ALFWorldEnv

    with pytest.raises(ValueError, match=message):
        ALFWorldEnv(cache_dir=str(tmp_path), **kwargs)


def test_generated_task_ids_are_listed_without_making_games(tmp_path):
    from agentrl.envs.alfworld import ALFWorldEnv

    env = ALFWorldEnv(cache_dir=str(tmp_path), generated={"train": 2, "valid_seen": 1})
    assert env.task_ids("valid_seen") == [f"valid_seen/{t}/0" for t in TASK_TYPES.values()]
    assert env.task_ids("train", limit=7)[-1] == "train/pick_and_place_simple/1"
    assert env.task_ids("valid_unseen") == []
    assert not any(tmp_path.iterdir())  # nothing generated until a game is played
    with pytest.raises(ValueError, match="bad generated ALFWorld task id"):
        env.reset(options={"task_id": "valid_seen/boil/0"})


# -- official splits ---------------------------------------------------------------------------
def test_official_scene_split_keeps_unseen_scenes_out_of_train():
    from agentrl.envs.alfworld.splits import TEST_UNSEEN_SCENES, official_counts, split_scenes

    train, seen, unseen = (split_scenes(s) for s in ("train", "valid_seen", "valid_unseen"))
    assert unseen == {10, 219, 308, 424}  # ALFRED's valid_unseen rooms, one per room type
    assert not unseen & train and not unseen & seen
    assert seen <= train and len(train) == 108 and len(seen) == 85  # 88 with movable/sliced tasks
    assert not TEST_UNSEEN_SCENES & (train | seen | unseen)
    totals = {s: sum(official_counts(s).values()) for s in ("train", "valid_seen", "valid_unseen")}
    assert totals == {"train": 3553, "valid_seen": 140, "valid_unseen": 134}


def test_generator_draws_only_official_scenes_and_tasks():
    import numpy as np
    from agentrl.envs.alfworld.generate import Generator
    from agentrl.envs.alfworld.splits import split_scenes, task_specs

    gen = Generator()
    rng = np.random.default_rng(0)
    for split in ("train", "valid_seen", "valid_unseen"):
        for t in TASK_TYPES.values():
            pool = {s.number for s in gen.scene_pool(t, split)}
            assert pool and pool <= split_scenes(split)
            if split == "train":
                assert not pool & split_scenes("valid_unseen")
            spec = gen.draw_spec(t, split, rng)
            assert spec in task_specs(split, t)


def test_generated_official_counts_are_listed_without_making_games(tmp_path):
    from agentrl.envs.alfworld import ALFWorldEnv

    env = ALFWorldEnv(cache_dir=str(tmp_path))  # the defaults
    assert len(env.task_ids("valid_seen")) == 140 and len(env.task_ids("valid_unseen")) == 134
    assert len(env.task_ids("train")) == 600
    heat = ALFWorldEnv(
        cache_dir=str(tmp_path), task_types=["Heat"], generated={"train": "official"}
    )
    assert len(heat.task_ids("train")) == 459
    assert not any(tmp_path.iterdir())
    with pytest.raises(ValueError, match="'official'"):
        ALFWorldEnv(cache_dir=str(tmp_path), generated={"train": "all"})
    with pytest.raises(ValueError, match="invalid_rule"):
        ALFWorldEnv(cache_dir=str(tmp_path), invalid_rule="strict")
    with pytest.raises(ValueError, match="needs official data"):
        ALFWorldEnv(cache_dir=str(tmp_path), order="alfworld")


# -- the expert is optimal ---------------------------------------------------------------------
def test_expert_takes_the_soap_bar_already_at_the_sink():
    """The case where the old expert took 6 steps and Fast Downward 5."""
    statics = [
        ("objecttype", "soap_a", "soapbartype"),
        ("objecttype", "soap_b", "soapbartype"),
        ("receptacletype", "counter_1", "countertoptype"),
        ("receptacletype", "sink_1", "sinkbasintype"),
        ("receptacletype", "toilet_1", "toilettype"),
        ("receptacleatlocation", "counter_1", "loc_c"),
        ("receptacleatlocation", "sink_1", "loc_s"),
        ("receptacleatlocation", "toilet_1", "loc_t"),
        ("cancontain", "toilettype", "soapbartype"),
        ("cancontain", "countertoptype", "soapbartype"),
        ("cancontain", "sinkbasintype", "soapbartype"),
    ]
    names = {
        e: e.replace("_", " ") for e in ("soap_a", "soap_b", "counter_1", "sink_1", "toilet_1")
    }
    state = read_state(
        [
            ("atlocation", "agent1", "loc_start"),
            ("inreceptacle", "soap_a", "counter_1"),
            ("inreceptacle", "soap_b", "sink_1"),
        ]
    )
    task = Task("pick_clean_then_place_in_recep", "soapbar", "toilet", "")
    assert plan(task, read_statics(statics), state, names) == [
        "go to sink 1",
        "take soap b from sink 1",
        "clean soap b with sink 1",
        "go to toilet 1",
        "move soap b to toilet 1",
    ]


def _successors(st_, facts: frozenset, names: dict[str, str]):
    """Every command of the ALFWorld domain (alfred.pddl) applicable in ``facts``, with its result."""
    d = {f[0]: [] for f in facts}
    for f in facts:
        d.setdefault(f[0], []).append(f)
    at = next(f[2] for f in facts if f[0] == "atlocation")
    held = next((f[2] for f in facts if f[0] == "holds"), None)
    opened = {f[1] for f in facts if f[0] == "opened"}
    where = {f[1]: f[2] for f in facts if f[0] == "inreceptacle"}
    here = [r for r, loc in st_.rloc.items() if loc == at]

    def usable(r):
        return r not in st_.openable or r in opened

    for r, loc in st_.rloc.items():
        yield (
            f"go to {names[r]}",
            (facts - {("atlocation", "agent1", at)}) | {("atlocation", "agent1", loc)},
        )
    for r in here:
        if r in st_.openable and r not in opened:
            yield f"open {names[r]}", facts | {("opened", r)}
        if held is None:
            for o, rr in where.items():
                if rr == r and usable(r):
                    yield (
                        f"take {names[o]} from {names[r]}",
                        (facts - {("inreceptacle", o, r)}) | {("holds", "agent1", o)},
                    )
        elif usable(r) and (st_.rtype[r], st_.otype[held]) in st_.can_contain:
            yield (
                f"move {names[held]} to {names[r]}",
                (facts - {("holds", "agent1", held)}) | {("inreceptacle", held, r)},
            )
        verb = {"sinkbasin": ("clean", "isclean"), "microwave": ("heat", "ishot")}
        verb["fridge"] = ("cool", "iscool")
        if held is not None and st_.rtype[r] in verb:
            v, flag = verb[st_.rtype[r]]
            yield f"{v} {names[held]} with {names[r]}", facts | {(flag, held)}
        for o, rr in where.items():
            if rr == r and st_.otype[o].endswith("lamp"):
                yield f"use {names[o]}", facts | {("istoggled", o)}


def _bfs_length(task, st_, facts, names, limit=12):
    from collections import deque

    start = frozenset(facts)
    seen, queue = {start}, deque([(start, 0)])
    while queue:
        f, n = queue.popleft()
        if goal_met(task, st_, read_state(sorted(f))):
            return n
        if n >= limit:
            continue
        for _, nxt in _successors(st_, f, names):
            if nxt not in seen:
                seen.add(nxt)
                queue.append((nxt, n + 1))
    return None


_RTYPES = ["countertop", "fridge", "microwave", "sinkbasin", "cabinet", "desk"]


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(
        [
            "pick_and_place_simple",
            "pick_clean_then_place_in_recep",
            "pick_heat_then_place_in_recep",
            "pick_cool_then_place_in_recep",
            "pick_two_obj_and_place",
            "look_at_obj_in_light",
        ]
    ),
    st.lists(st.sampled_from(_RTYPES), min_size=3, max_size=5),
    st.lists(st.integers(0, 4), min_size=1, max_size=3),
    st.lists(st.integers(0, 4), min_size=0, max_size=1),
    st.lists(st.integers(0, 4), min_size=5, max_size=5),
    st.integers(-1, 4),
)
def test_expert_plan_is_as_short_as_breadth_first_search(
    task_type, rtypes, eggs, mugs, loc_of, start
):
    """Against an exhaustive search over the domain's commands, in random small rooms (shared
    locations, closed receptacles, already-cool objects, a wrong object in hand)."""
    from hypothesis import assume

    rtypes = list(dict.fromkeys(rtypes)) + ["desk"]  # unique types; a desk holds the lamp
    recs = [f"{t}_{i}" for i, t in enumerate(rtypes)]
    statics = [("receptacletype", r, f"{t}type") for r, t in zip(recs, rtypes)]
    statics += [("receptacleatlocation", r, f"loc{loc_of[i % 5] % 3}") for i, r in enumerate(recs)]
    statics += [
        ("openable", r) for r, t in zip(recs, rtypes) if t in ("fridge", "microwave", "cabinet")
    ]
    statics += [("cancontain", f"{t}type", o) for t in rtypes for o in ("eggtype", "mugtype")]
    facts = {("atlocation", "agent1", "loc_start" if start < 0 else f"loc{start % 3}")}
    objs = [f"egg_{i}" for i in range(len(eggs))] + [f"mug_{i}" for i in range(len(mugs))]
    for o, k in zip(objs, eggs + mugs):
        statics.append(("objecttype", o, o.split("_")[0] + "type"))
        facts.add(("inreceptacle", o, recs[k % len(recs)]))
    statics += [("objecttype", "lamp_0", "desklamptype")]
    facts.add(("inreceptacle", "lamp_0", recs[-1]))
    if len(eggs) > 1:
        facts.add(("iscool", "egg_1"))  # as alfworld marks target objects found in a fridge
    if mugs and start % 2 == 0:  # holding a mug the task does not need
        facts = {f for f in facts if f[1:2] != ("mug_0",)} | {("holds", "agent1", "mug_0")}
    names = {e: e.replace("_", " ") for e in recs + objs + ["lamp_0"]}
    parent = "" if task_type == "look_at_obj_in_light" else "countertop"
    task = Task(task_type, "egg", parent, "desklamp" if not parent else "")
    st_ = read_statics(statics)
    assume(parent == "" or "countertop" in rtypes)
    assume(task_type != "pick_two_obj_and_place" or len(eggs) >= 2)
    assume(not goal_met(task, st_, read_state(sorted(facts))))
    best = _bfs_length(task, st_, facts, names)
    got = plan(task, st_, read_state(sorted(facts)), names)
    if best is None:
        return  # no solution within the search limit
    assert got is not None and len(got) == best, (got, best)
    # and the plan works: replayed through the same command semantics it reaches the goal
    f = frozenset(facts)
    for cmd in got:
        f = dict(_successors(st_, f, names))[cmd]
    assert goal_met(task, st_, read_state(sorted(f)))


# -- malformed data files ------------------------------------------------------------------------
_GOOD_TRAJ = {
    "task_type": "pick_heat_then_place_in_recep",
    "pddl_params": {
        "object_target": "Egg",
        "parent_target": "Fridge",
        "toggle_target": "",
        "mrecep_target": "",
        "object_sliced": False,
    },
}


def _junk_files() -> list[bytes]:
    import random

    rng = random.Random(0)
    good = json.dumps(_GOOD_TRAJ).encode()
    out = [b"", b"\x00" * 64, b"\xff\xfe\xfd", "caf\u00e9".encode("latin-1"), b"{" * 100_000]
    out += [b"[" * n + b"]" * n for n in (10_000, 200_000)]  # deep nesting -> RecursionError
    out += [b'{"a":' * 50_000 + b"1" + b"}" * 50_000]
    out += [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400))) for _ in range(40)]
    out += [good[: rng.randrange(1, len(good))] for _ in range(20)]  # truncated
    out += [good.replace(b"Egg", bytes([rng.randrange(128, 256)])) for _ in range(10)]
    out += [b"null", b"[]", b"42", b'"text"', b"{}"]
    return out


@pytest.mark.parametrize("reader", ["traj", "game"])
def test_malformed_files_give_an_error_naming_the_file(tmp_path, reader):
    """Every junk file gives GameFileError naming the file: never UnicodeDecodeError,
    RecursionError or a KeyError deep inside (counts are in docs/envs/alfworld.md)."""
    path = tmp_path / ("traj_data.json" if reader == "traj" else "game.tw-pddl")
    read = read_traj if reader == "traj" else read_game
    for k, content in enumerate(_junk_files()):
        path.write_bytes(content)
        with pytest.raises(GameFileError) as err:
            read(path)
        assert str(path) in str(err.value), (k, content[:40])
    path.unlink()
    path.mkdir()  # a directory where the file should be
    with pytest.raises(GameFileError, match="cannot read"):
        read(path)


_NAME = st.text(alphabet="AbcZ", min_size=1, max_size=8)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["object_target", "parent_target", "toggle_target", "mrecep_target"]),
    st.one_of(
        st.integers(),
        st.floats(allow_nan=True),
        st.lists(_NAME, max_size=2),
        st.dictionaries(_NAME, _NAME, max_size=2),
        st.text(min_size=1).filter(lambda t: not t.isascii() or not t.isalpha()),
        st.booleans(),
    ),
)
def test_garbage_pddl_params_are_rejected_naming_the_key(tmp_path_factory, key, value):
    path = tmp_path_factory.mktemp("traj") / "traj_data.json"
    traj = json.loads(json.dumps(_GOOD_TRAJ))
    traj["pddl_params"][key] = value
    path.write_text(json.dumps(traj))
    with pytest.raises(GameFileError, match=key) as err:
        read_traj(path)
    assert str(path) in str(err.value)


def test_pddl_params_must_name_the_task_targets(tmp_path):
    path = tmp_path / "traj_data.json"
    for task_type, key in (
        ("pick_and_place_simple", "parent_target"),
        ("look_at_obj_in_light", "toggle_target"),
    ):
        traj = {"task_type": task_type, "pddl_params": {"object_target": "Egg"}}
        path.write_text(json.dumps(traj))
        with pytest.raises(GameFileError, match=f"{key}.*empty"):
            read_traj(path)
    # names that parse but are not in the game are caught at reset (check_task)
    from agentrl.envs.alfworld.world import check_task

    with pytest.raises(GameFileError, match="object_target.*'dragon'"):
        check_task(
            Task("pick_and_place_simple", "dragon", "fridge", ""), read_statics(STATIC), path
        )
    check_task(Task("pick_and_place_simple", "egg", "fridge", ""), read_statics(STATIC), path)


def test_first_use_generation_says_its_plan_progress_and_how_to_skip_it(tmp_path, capsys):
    from agentrl.envs.alfworld.data import GeneratedGames
    from agentrl.envs.alfworld.tasks import TASK_TYPES

    games = GeneratedGames((TASK_TYPES[1],), {"valid_seen": 3}, cache_dir=tmp_path)
    games.resolve(games.games("valid_seen")[0])
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("ALFWorld: 3 of the 3 generated valid_seen games are not in the cache")
    assert "python -m agentrl.envs.alfworld.generate" in err[0] and "data_dir" in err[0]
    assert err[1].startswith("ALFWorld: [1/3] made valid_seen/pick_and_place_simple/0 in ")
    assert "min left for this split" in err[1]
