"""Every registered env honours the text-env contract (check_env and the info keys)."""

from __future__ import annotations

import gymnasium as gym
import pytest
from agentrl.envs.base import INFO_KEYS, make_info
from gymnasium.utils.env_checker import check_env

from agentrl import envs

ENV_IDS = [e for e in envs.list_envs() if e != "agentrl/OpenEnv-v0"]  # needs a server: test_openenv


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env(env_id):
    env = gym.make(env_id)
    check_env(env.unwrapped)
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_info_keys_on_reset_and_every_step(env_id):
    env = envs.make(env_id)
    obs, info = env.reset(seed=0)
    assert isinstance(obs, str)
    for _ in range(5):
        assert set(INFO_KEYS) <= set(info), f"missing keys: {set(INFO_KEYS) - set(info)}"
        assert 0.0 <= info["score"] <= 1.0
        hash(info["state_key"])
        try:
            action = env.expert_action()
        except NotImplementedError:  # games: no expert wins every game; any legal move will do
            action = info["admissible_actions"][0]
        obs, _, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str)
        if terminated or truncated:
            break
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_same_seed_same_initial_state(env_id):
    a, b = envs.make(env_id), envs.make(env_id)
    (oa, ia), (ob, ib) = a.reset(seed=11), b.reset(seed=11)
    assert oa == ob and ia["state_key"] == ib["state_key"] and ia["task_id"] == ib["task_id"]
    a.close()
    b.close()


def test_make_info_rejects_contract_breaks():
    good = dict(
        instruction="x",
        task_id="1",
        category="c",
        admissible_actions=["a"],
        state_key="s",
        action_valid=True,
        won=False,
        score=0.5,
        milestones=(),
    )
    assert make_info(**good)["score"] == 0.5
    with pytest.raises(ValueError, match="score"):
        make_info(**{**good, "score": 1.5})
    with pytest.raises(TypeError, match="state_key"):
        make_info(**{**good, "state_key": ["unhashable"]})
    with pytest.raises(TypeError, match="task_id"):
        make_info(**{**good, "task_id": 3})


def test_unknown_env_lists_the_registered_ones():
    with pytest.raises(KeyError, match="Sokoban-v0"):
        envs.make("NoSuchEnv-v0")


def test_namespace_and_short_ids_resolve_to_the_same_env():
    assert type(envs.make("Sokoban-v0")) is type(envs.make("agentrl/Sokoban-v0"))
    assert isinstance(gym.make("agentrl/Sokoban-v0").unwrapped, envs.TextEnv)
