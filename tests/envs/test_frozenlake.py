"""The discrete-env adapter, exercised through agentrl/FrozenLake-v0."""

from agentrl import envs


def test_expert_reaches_the_goal_and_invalid_actions_change_nothing():
    env = envs.make("FrozenLake-v0")
    obs, info = env.reset(seed=0)
    assert "P" in obs and info["admissible_actions"] == ["left", "down", "right", "up"]
    _, reward, terminated, truncated, info2 = env.step("jump")
    assert not info2["action_valid"] and info2["state_key"] == info["state_key"] and reward == 0.0
    for _ in range(20):
        _, reward, terminated, truncated, info = env.step(env.expert_action())
        if terminated or truncated:
            break
    assert info["won"] and reward == 1.0 and info["score"] == 1.0


def test_step_cap_truncates():
    env = envs.make("FrozenLake-v0", max_steps=2)
    env.reset(seed=0)
    assert env.step("up")[3] is False
    assert env.step("up")[3] is True
