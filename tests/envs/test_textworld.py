"""TextWorld-v0 on games made offline by TextWorld's own generator."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from agentrl.envs.textworld import TextWorldEnv, clean_feedback, expand_game_files, make_game_file
from agentrl.envs.textworld.games import MakeSettings
from gymnasium.utils.env_checker import check_env


@pytest.fixture(scope="module")
def games(textworld_games) -> list[Path]:
    return textworld_games


def test_generated_games_come_with_metadata(games):
    for g in games:
        assert g.suffix == ".z8" and g.is_file() and g.with_suffix(".json").is_file()
    # a second call finds the game instead of making it again
    assert make_game_file(games[0].parent.parent, 1, MakeSettings(3, 6, 3)) == games[0]


def test_expert_wins_and_info_contract(games):
    env = TextWorldEnv(game_files=[str(g) for g in games], eval_game_files=str(games[1]))
    check_env(env)
    assert env.task_ids("train") == [str(g) for g in games] and env.task_ids("test") == [
        str(games[1])
    ]
    for tid in env.task_ids("train"):
        obs, info = env.reset(options={"task_id": tid})
        assert info["instruction"] and "$$" not in obs and not obs.rstrip().endswith(">")
        assert info["score"] == 0.0 and info["milestones"] == ()
        total, steps, terminated = 0.0, 0, False
        while not terminated and steps < 30:
            action = env.expert_action()
            assert action.lower() in {a.lower() for a in info["admissible_actions"]}
            obs, reward, terminated, truncated, info = env.step(action)
            total += reward
            steps += 1
        assert info["won"] and terminated and info["score"] == 1.0
        assert (
            total == info["max_points"] and info["milestones"][-1] == f"point_{info['max_points']}"
        )
    env.close()


def test_invalid_commands_leave_the_state(games):
    env = TextWorldEnv(game_files=str(games[0]))
    _, info0 = env.reset(seed=0)
    for bad in ("dance wildly", "", "x" * 1000, None):
        _, reward, terminated, _, info = env.step(bad)
        assert info["action_valid"] is False and reward == 0.0 and not terminated
        assert info["state_key"] == info0["state_key"]
    _, _, _, _, info = env.step("LOOK")  # admissible, matched case-insensitively
    assert info["action_valid"] and info["state_key"] == info0["state_key"]
    env.close()


def test_state_key_follows_the_true_state(games):
    env = TextWorldEnv(game_files=str(games[0]))
    _, info = env.reset(seed=0)
    keys = {info["state_key"]}
    changed = False
    for _ in range(3):
        _, _, terminated, _, nxt = env.step(env.expert_action())
        changed |= nxt["state_key"] not in keys
        keys.add(nxt["state_key"])
        if terminated:
            break
    assert changed  # the expert's moves change the state
    _, again = env.reset(seed=0)
    assert again["state_key"] == info["state_key"]  # a reset restores it
    env.close()


def test_generated_mode_and_bad_files(tmp_path, games):
    env = TextWorldEnv(generated={"train": 1, "test": 0}, cache_dir=str(tmp_path / "cache"))
    assert env.task_ids("train") == ["train/0"] and env.task_ids("test") == []
    obs, info = env.reset(seed=5)
    assert info["task_id"] == "train/0" and obs
    with pytest.raises(ValueError, match="bad TextWorld task id"):
        env.reset(options={"task_id": "train/x"})
    made = sorted((tmp_path / "cache").rglob("*.z8"))
    for unlisted in ("train/1", "train/99999", "test/0"):  # would each generate and keep a game
        with pytest.raises(ValueError, match="unknown TextWorld task id"):
            env.reset(options={"task_id": unlisted})
    assert sorted((tmp_path / "cache").rglob("*.z8")) == made
    with pytest.raises(ValueError, match="splits"):
        env.task_ids("valid")
    env.close()
    with pytest.raises(FileNotFoundError, match="not found"):
        TextWorldEnv(game_files=str(tmp_path / "nope.z8"))
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(games[0], lone / games[0].name)
    with pytest.raises(FileNotFoundError, match=r"\.json"):
        TextWorldEnv(game_files=str(lone))
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="not a TextWorld game"):
        expand_game_files(tmp_path / "notes.txt")
    assert expand_game_files(str(games[0].parent / "*.z8")) == [games[0]]


def test_clean_feedback():
    raw = (
        "\n\n   ____\n  | $$ \\\n   \\$$ >$\n\nWelcome!\n\n-= Room =-\nA room.\n\n>  -= Room =-0/1"
    )
    assert clean_feedback(raw) == "Welcome!\n\n-= Room =-\nA room."
    assert (
        clean_feedback("\nYou can't go that way.\n\n\n>   -= Pantry =-0/2")
        == "You can't go that way."
    )


def test_broken_game_files_get_named_errors(tmp_path, games):
    meta = games[0].with_suffix(".json")
    bad = tmp_path / "bad.z8"
    bad.write_bytes(b"\x00" * 512)  # Jericho's C core would exit the process on this header
    shutil.copy(meta, bad.with_suffix(".json"))
    env = TextWorldEnv(game_files=str(bad))
    with pytest.raises(ValueError, match="not a Z-machine story file") as err:
        env.reset(seed=0)
    assert str(bad) in str(err.value)
    broken_meta = tmp_path / "meta.z8"
    shutil.copy(games[0], broken_meta)
    broken_meta.with_suffix(".json").write_text("{broken")
    with pytest.raises(ValueError, match="cannot load this game"):
        TextWorldEnv(game_files=str(broken_meta)).reset(seed=0)
    glulx = tmp_path / "old.ulx"  # TextWorld 1.7 dropped Glulx: a clear error, not a crash
    shutil.copy(games[0], glulx)
    shutil.copy(meta, glulx.with_suffix(".json"))
    with pytest.raises(ValueError, match="Glulx"):
        TextWorldEnv(game_files=str(glulx)).reset(seed=0)
