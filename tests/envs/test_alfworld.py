"""ALFWorld pieces that need no engine: task types, true-state reading, state keys, milestones,
the full-knowledge expert (on hand-built states), data-directory and game-file errors."""

from __future__ import annotations

import json

import pytest
from agentrl.envs.alfworld.data import _interleave, find_json_root, read_traj
from agentrl.envs.alfworld.engine import GameFileError, read_game
from agentrl.envs.alfworld.oracle import next_command
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
from hypothesis import given
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
