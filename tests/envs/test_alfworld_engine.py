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
from agentrl.envs.alfworld.tasks import TASK_TYPES

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
            assert info["task_id"] == tid and info["category"] in TASK_TYPES.values()
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
    movable = root / "train" / "pick_and_place_with_movable_recep-Apple-Bowl-Fridge-7" / "trial_1"
    shutil.copytree(root / ids[5], movable)
    fresh = ALFWorldEnv(data_dir=str(data))
    assert fresh.task_ids("train") == [ids[0], ids[1], ids[2], ids[5]]
    assert any("solvable=false" in s for s in fresh.games.skipped["train"])
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
