"""ALFWorld-v0 on the real engine, on games made by our offline generator in the official layout.

One session fixture generates 10 games (all six task types in ``train``, two in each validation
split); the tests read that directory as official data, with our loader and with alfworld's own
``AlfredTWEnv.collect_game_files``. (The 60-game expert check is ``scripts/bench_alfworld.py
--only expert``; its result is in docs/benchmarks.md.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from agentrl.envs.alfworld import ALFWorldEnv, GameFileError
from agentrl.envs.alfworld.generate import generate_games
from agentrl.envs.alfworld.tasks import SHORT_NAMES, TASK_TYPES

from agentrl import envs
from agentrl.pool import EnvPool, EnvSpec

ROOT = Path(__file__).resolve().parents[2]
SEED = 7


@pytest.fixture(scope="session")
def alf_data(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("alfworld_data")
    generate_games(out, {"train": 1}, seed=SEED, splits=["train"], progress=False)
    generate_games(
        out,
        {"valid_seen": 1},
        seed=SEED,
        splits=["valid_seen"],
        task_types=["Pick", "Clean"],
        progress=False,
    )
    generate_games(
        out,
        {"valid_unseen": 1},
        seed=SEED,
        splits=["valid_unseen"],
        task_types=["Look", "Pick2"],
        progress=False,
    )
    return out


@pytest.fixture(scope="module")
def env(alf_data):
    e = ALFWorldEnv(data_dir=str(alf_data))
    yield e
    e.close()


def test_generated_layout_is_the_official_one(alf_data):
    root = alf_data / "json_2.1.1"
    trials = sorted(p.parent for p in root.rglob("traj_data.json"))
    assert len(trials) == 10
    for trial in trials:
        split, task_dir = trial.relative_to(root).parts[:2]
        assert split in ("train", "valid_seen", "valid_unseen")
        task_type, obj, mrecep, target, scene = task_dir.split("-")
        assert task_type in TASK_TYPES.values() and mrecep == "None" and scene.isdigit()
        traj = json.loads((trial / "traj_data.json").read_text())
        assert traj["task_type"] == task_type and traj["pddl_params"]["object_target"] == obj
        game = json.loads((trial / "game.tw-pddl").read_text())
        assert game["solvable"] is True and game["walkthrough"]
        assert "UNKNOWN GOAL" not in game["grammar"]
        assert (trial / "initial_state.pddl").read_text() == game["pddl_problem"]
    train_types = {
        t.relative_to(root).parts[1].split("-")[0]
        for t in trials
        if t.relative_to(root).parts[0] == "train"
    }
    assert train_types == set(TASK_TYPES.values())  # every task type is represented


def test_alfworlds_own_loader_finds_our_games(alf_data):
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    config = {
        "env": {"goal_desc_human_anns_prob": 0, "task_types": list(TASK_TYPES)},
        "dataset": {
            "data_path": str(alf_data / "json_2.1.1" / "train"),
            "eval_id_data_path": str(alf_data / "json_2.1.1" / "valid_seen"),
            "num_train_games": -1,
            "num_eval_games": -1,
        },
    }
    assert AlfredTWEnv(config, train_eval="train").num_games == 6
    assert AlfredTWEnv(config, train_eval="eval_in_distribution").num_games == 2


def test_official_layout_loader(env, alf_data, monkeypatch):
    train = env.task_ids("train")
    assert len(train) == 6
    # the fixed order interleaves task types in the canonical order
    assert [t.split("/")[1].split("-")[0] for t in train] == list(TASK_TYPES.values())
    assert env.task_ids("train", limit=2) == train[:2]
    assert [t.split("/")[1].split("-")[0] for t in env.task_ids("valid_seen")] == [
        "pick_and_place_simple",
        "pick_clean_then_place_in_recep",
    ]
    assert len(env.task_ids("valid_unseen")) == 2
    heat_only = ALFWorldEnv(data_dir=str(alf_data), task_types=["Heat"])
    assert [t.split("/")[1].split("-")[0] for t in heat_only.task_ids("train")] == [
        "pick_heat_then_place_in_recep"
    ]
    # $ALFWORLD_DATA-style values are expanded
    monkeypatch.setenv("AGENTRL_TEST_ALFDATA", str(alf_data))
    assert ALFWorldEnv(data_dir="$AGENTRL_TEST_ALFDATA").task_ids("valid_seen") == env.task_ids(
        "valid_seen"
    )


def test_expert_wins_every_game_within_50_steps(env):
    for split in ("train", "valid_seen", "valid_unseen"):
        for tid in env.task_ids(split):
            obs, info = env.reset(options={"task_id": tid})
            assert info["task_id"] == tid and info["task_type"] in TASK_TYPES.values()
            assert info["category"] == SHORT_NAMES[info["task_type"]]  # the paper's column names
            assert obs.startswith("You are in the middle of a room") and "Welcome" not in obs
            assert info["instruction"] and obs.endswith(info["instruction"])
            assert "help" not in info["admissible_actions"]
            scores, steps, reward = [info["score"]], 0, 0.0
            terminated = truncated = False
            while not (terminated or truncated):
                action = env.expert_action()
                assert action in info["admissible_actions"]
                obs, reward, terminated, truncated, info = env.step(action)
                scores.append(info["score"])
                steps += 1
            assert info["won"] and terminated and not truncated, (tid, steps)
            assert reward == 10.0 and steps <= 50
            assert scores == sorted(scores) and scores[-1] == 1.0
            assert info["milestones"][-1] in ("placed", "looked", "placed_2")


def test_fast_downward_planner_expert(alf_data):
    """The package's planner expert (Fast Downward's replanner) on the small-room task types; it
    is exact but slow on kitchens with heat/cool/clean, hence not the default."""
    e = ALFWorldEnv(data_dir=str(alf_data), expert="planner", task_types=["Pick", "Look"])
    for tid in e.task_ids("train"):
        e.reset(options={"task_id": tid})
        for _ in range(20):
            _, _, terminated, _, info = e.step(e.expert_action())
            if terminated:
                break
        assert info["won"], tid
    e.close()
    with pytest.raises(ValueError, match="expert"):
        ALFWorldEnv(data_dir=str(alf_data), expert="psychic")


def test_invalid_commands_change_nothing(env):
    obs0, info0 = env.reset(options={"task_id": env.task_ids("train")[0]})
    for bad in ("fly to the moon", "go to", "take", "x" * 5000, 12345, "GO   TO  nowhere"):
        obs, reward, terminated, truncated, info = env.step(bad)
        assert obs == "Nothing happens."
        assert info["action_valid"] is False and reward == 0.0 and not terminated
        assert info["state_key"] == info0["state_key"]
    # case and spacing are normalised; look/inventory/examine are valid and change no state
    target = info0["admissible_actions"][0]
    obs, _, _, _, info = env.step("  " + target.upper().replace(" ", "   ") + " ")
    assert info["action_valid"] and obs != "Nothing happens."
    key = info["state_key"]
    for cmd in ("look", "inventory", "help"):
        _, _, _, _, info = env.step(cmd)
        assert info["action_valid"] and info["state_key"] == key


def test_state_key_merges_paths_and_separates_states(env):
    _, info = env.reset(options={"task_id": env.task_ids("valid_seen")[0]})
    gos = [a for a in info["admissible_actions"] if a.startswith("go to ")]
    a, b = gos[0], gos[1]
    env.step(a)
    _, _, _, _, via_a = env.step(b)
    _, info = env.reset(options={"task_id": env.task_ids("valid_seen")[0]})
    _, _, _, _, direct = env.step(b)
    assert via_a["state_key"] == direct["state_key"]  # same state, different paths
    assert direct["state_key"] != info["state_key"]
    opens = [x for x in direct["admissible_actions"] if x.startswith("open ")]
    if opens:
        _, _, _, _, opened = env.step(opens[0])
        assert opened["state_key"] != direct["state_key"]


def test_seeds_pick_training_games_deterministically(env):
    train = env.task_ids("train")
    _, i3 = env.reset(seed=3)
    assert i3["task_id"] == train[3]
    _, i9 = env.reset(seed=9)
    assert i9["task_id"] == train[9 % len(train)]
    o1, a = env.reset(seed=4)
    o2, b = env.reset(seed=4)
    assert o1 == o2 and a["state_key"] == b["state_key"]


def test_reward_and_step_cap_are_configurable(alf_data):
    e = ALFWorldEnv(data_dir=str(alf_data), max_steps=2, win_reward=1.0)
    _, info = e.reset(options={"task_id": e.task_ids("train")[0]})
    _, _, terminated, truncated, _ = e.step("look")
    assert not truncated
    _, _, terminated, truncated, _ = e.step("look")
    assert truncated and not terminated
    _, info = e.reset(options={"task_id": e.task_ids("train")[0]})
    total = 0.0
    for _ in range(30):
        _, r, terminated, _, info = e.step(e.expert_action())
        total += r
        if terminated:
            break
    assert info["won"] and total == 1.0
    e.close()


def test_bad_task_ids_and_bad_game_files(alf_data, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(alf_data, data)
    root = data / "json_2.1.1"
    e = ALFWorldEnv(data_dir=str(data))
    with pytest.raises(ValueError, match="bad ALFWorld task id"):
        e.reset(options={"task_id": "../../etc/passwd"})
    with pytest.raises(GameFileError, match="no traj_data.json"):
        e.reset(options={"task_id": "train/pick_and_place_simple-X-None-Y-1/trial_x"})
    ids = e.task_ids("train")
    # malformed JSON
    game = root / ids[0] / "game.tw-pddl"
    game.write_text("{broken")
    with pytest.raises(GameFileError, match="not valid JSON") as err:
        e.reset(options={"task_id": ids[0]})
    assert str(game) in str(err.value)
    # PDDL the engine rejects
    game = root / ids[1] / "game.tw-pddl"
    content = json.loads(game.read_text())
    content["pddl_problem"] = content["pddl_problem"].replace("(:init", "(:init (", 1)
    game.write_text(json.dumps(content))
    with pytest.raises(GameFileError, match="PDDL engine rejected") as err:
        e.reset(options={"task_id": ids[1]})
    assert str(game) in str(err.value)
    # the env still works after errors
    _, info = e.reset(options={"task_id": ids[2]})
    assert info["task_id"] == ids[2]
    # unsolvable, movable-receptacle and game-less trials are not listed (alfworld skips them too)
    game = root / ids[3] / "game.tw-pddl"
    content = json.loads(game.read_text())
    content["solvable"] = False
    game.write_text(json.dumps(content))
    (root / ids[4] / "game.tw-pddl").unlink()
    game = root / ids[2] / "game.tw-pddl"
    content = json.loads(game.read_text())
    del content["solvable"]  # AlfredTWEnv skips such folders ("missing solvable key")
    nokey = root / "train" / "pick_and_place_simple-X-None-Y-7" / "trial_nokey"
    shutil.copytree(root / ids[2], nokey)
    (nokey / "game.tw-pddl").write_text(json.dumps(content))
    movable = root / "train" / "pick_and_place_with_movable_recep-Apple-Bowl-Fridge-7" / "trial_1"
    shutil.copytree(root / ids[5], movable)
    fresh = ALFWorldEnv(data_dir=str(data))
    # the broken JSON of ids[0] has no readable 'solvable' key: skipped, with its reason
    assert fresh.task_ids("train") == [ids[1], ids[2], ids[5]]
    assert any(s.startswith(ids[0]) for s in fresh.games.skipped["train"])
    assert any("solvable=false" in s for s in fresh.games.skipped["train"])
    assert any("no 'solvable' key" in s for s in fresh.games.skipped["train"])
    with pytest.raises(GameFileError, match="unsolvable"):
        fresh.reset(options={"task_id": ids[3]})
    e.close()
    fresh.close()


def test_missing_data_dir_error_says_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="alfworld-download"):
        ALFWorldEnv(data_dir=str(tmp_path / "missing"))


def test_engine_load_keeps_sys_argv(env):
    before = list(sys.argv)
    env.reset(options={"task_id": env.task_ids("valid_unseen")[0]})
    assert sys.argv == before


def test_env_pool_runs_alfworld_in_workers(alf_data):
    spec = EnvSpec("ALFWorld-v0", {"data_dir": str(alf_data)})
    ids = ALFWorldEnv(data_dir=str(alf_data)).task_ids("valid_seen")
    with EnvPool([spec, spec], num_workers=2) as pool:
        resets = pool.reset(options=[{"task_id": ids[0]}, {"task_id": ids[1]}])
        assert [info["task_id"] for _, info in resets] == ids
        done = [False, False]
        for _ in range(50):
            live = [i for i in range(2) if not done[i]]
            if not live:
                break
            actions = pool.call(live, "expert_action")
            for i, res in zip(live, pool.step(live, actions)):
                assert "error" not in res.info
                done[i] = res.terminated
        assert all(done)
    assert envs.make("ALFWorld-v0", data_dir=str(alf_data)).task_ids("valid_seen") == ids


def test_generator_is_deterministic_across_processes(tmp_path):
    outs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"out{hash_seed}"
        cmd = [
            sys.executable,
            "-m",
            "agentrl.envs.alfworld.generate",
            "--out",
            str(out),
            "--per-type",
            "1",
            "--seed",
            "3",
            "--splits",
            "valid_seen",
            "--task-types",
            "Look",
            "--quiet",
        ]
        run = subprocess.run(
            cmd,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
        )
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout)["written"] == 1
        outs.append(out)
    files = [
        sorted(p.relative_to(o) for o in [out] for p in out.rglob("*") if p.is_file())
        for out in outs
    ]
    assert files[0] == files[1] and len(files[0]) == 3
    for rel in files[0]:
        assert (outs[0] / rel).read_bytes() == (outs[1] / rel).read_bytes()
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentrl.envs.alfworld.generate",
            "--out",
            str(tmp_path),
            "--per-type",
            "1",
            "--task-types",
            "boil",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "unknown ALFWorld task type" in bad.stderr


def test_generated_splits_use_the_official_scenes(alf_data):
    from agentrl.envs.alfworld.splits import split_scenes

    root = alf_data / "json_2.1.1"
    for split in ("train", "valid_seen", "valid_unseen"):
        scenes = {int(p.parent.name.rsplit("-", 1)[1]) for p in (root / split).glob("*/trial_*")}
        assert scenes and scenes <= split_scenes(split)
        if split != "valid_unseen":
            assert not scenes & {10, 219, 308, 424}  # never an unseen room in train/valid_seen


def test_official_order_is_alfworlds(alf_data):
    """order="alfworld" lists a split exactly as AlfredTWEnv collects it, shuffled as TextWorld's
    gym env shuffles it (numpy RandomState(1234))."""
    import numpy as np
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    config = {
        "env": {"goal_desc_human_anns_prob": 0, "task_types": list(TASK_TYPES)},
        "dataset": {"data_path": str(alf_data / "json_2.1.1" / "train"), "num_train_games": -1},
    }
    theirs = list(AlfredTWEnv(config, train_eval="train").game_files)
    np.random.RandomState(1234).shuffle(theirs)
    e = ALFWorldEnv(data_dir=str(alf_data), order="alfworld")
    ours = [str(g.game_file) for g in e.games.games("train")]
    assert ours == theirs
    assert sorted(e.task_ids("train")) == sorted(
        ALFWorldEnv(data_dir=str(alf_data)).task_ids("train")
    )


def test_format_rule_marks_well_formed_commands_valid(alf_data):
    e = ALFWorldEnv(data_dir=str(alf_data), invalid_rule="format")
    _, info0 = e.reset(options={"task_id": e.task_ids("train")[0]})
    for cmd in ("fly to the moon", "take", "go to nowhere"):
        obs, _, _, _, info = e.step(cmd)
        assert obs == "Nothing happens." and info["action_valid"] is True
        assert info["state_key"] == info0["state_key"]  # the state still does not change
    for junk in ("", "   ", "x" * 600, "go\x00to", "\\quit", 7, "take \ud800"):
        obs, _, _, _, info = e.step(junk)
        if junk == "\\quit":  # a backslash is text like any other here, not an escape
            assert info["action_valid"] is True
        else:
            assert info["action_valid"] is False, junk
        assert obs == "Nothing happens." and info["state_key"] == info0["state_key"]
    e.close()


def test_garbage_grammar_and_absent_targets_name_the_file(alf_data, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(alf_data, data)
    root = data / "json_2.1.1"
    e = ALFWorldEnv(data_dir=str(data))
    ids = e.task_ids("train")
    game = root / ids[0] / "game.tw-pddl"
    content = json.loads(game.read_text())
    content["grammar"] = "}}{{ not a grammar " * 20
    game.write_text(json.dumps(content))
    with pytest.raises(GameFileError) as err:
        e.reset(options={"task_id": ids[0]})
    assert str(game) in str(err.value)
    traj = root / ids[1] / "traj_data.json"
    content = json.loads(traj.read_text())
    content["pddl_params"]["object_target"] = "Dragon"
    traj.write_text(json.dumps(content))
    with pytest.raises(GameFileError, match="'dragon' is not a type in the game") as err:
        e.reset(options={"task_id": ids[1]})
    assert str(traj) in str(err.value)
    _, info = e.reset(options={"task_id": ids[2]})  # the env keeps working
    assert info["task_id"] == ids[2]
    e.close()


def _shared_location_games(env) -> list[str]:
    out = []
    for split in ("train", "valid_seen", "valid_unseen"):
        for tid in env.task_ids(split):
            problem = json.loads(env.games.get(tid).game_file.read_text())["pddl_problem"]
            locs = [
                line.split()[-1]
                for line in problem.splitlines()
                if line.strip().startswith("(receptacleAtLocation")
            ]
            if len(set(locs)) < len(locs):
                out.append(tid)
    return out


def test_state_key_is_a_function_of_what_the_agent_observes(env):
    """On games whose receptacles share locations: random walks (admissible commands, then look,
    inventory and the admissible list at each state); equal keys never show different text."""
    import random

    games = _shared_location_games(env)
    assert games, "the fixture should hold a game with shared locations"
    seen: dict[str, tuple] = {}
    rng = random.Random(0)
    for tid in games[:2]:
        for _ in range(2):
            _, info = env.reset(options={"task_id": tid})
            for _ in range(10):
                key = info["state_key"]
                look, _, _, _, _ = env.step("look")
                inv, _, _, _, info = env.step("inventory")
                view = (tid, look, inv, tuple(sorted(info["admissible_actions"])))
                assert seen.setdefault(key, view) == view, key
                if info["won"]:
                    break
                _, _, terminated, _, info = env.step(rng.choice(info["admissible_actions"]))
                if terminated:
                    break
    assert len(seen) > 10


def test_oracle_matches_fast_downwards_optimum(alf_data):
    """The expert's plan length equals the planner's (blind search, all actions cost 1 except the
    treatments and toggles, which every solution needs once) on the small-room task types."""
    from agentrl.envs.alfworld.oracle import plan
    from agentrl.envs.alfworld.world import facts_of, read_state

    e = ALFWorldEnv(data_dir=str(alf_data), task_types=["Pick", "Look"])
    for tid in e.task_ids("train") + e.task_ids("valid_unseen"):
        e.reset(options={"task_id": tid})
        state = read_state(facts_of(e._gs["_facts"]))
        ours = plan(e._task, e._statics, state, e._names)
        assert ours is not None and len(ours) == len(e._engine.plan()), tid
    e.close()
