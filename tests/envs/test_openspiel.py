"""OpenSpiel games as multi-agent text envs: the contract with its multi-agent rules, seats
played by OpenSpiel's bots, rewards per agent, and the rules' own failures on leaky or miscounting
envs (real OpenSpiel games throughout)."""

from __future__ import annotations

import pytest
from agentrl.envs.contract import check_contract
from agentrl.envs.multiagent import agent_problem, is_multiagent
from agentrl.envs.openspiel import OpenSpielEnv

from agentrl import envs

pytest.importorskip("pyspiel")

GAMES = ["TicTacToe-v0", "KuhnPoker-v0", "LeducPoker-v0", "Goofspiel-v0", "Hanabi-v0"]


@pytest.mark.parametrize("env_id", GAMES)
def test_every_game_passes_the_contract(env_id):
    results = check_contract(lambda: envs.make(env_id), seeds=(0, 1), max_steps=30)
    failed = [r.line() for r in results if r.ok is False]
    assert not failed, failed
    by_rule = {r.rule: r.ok for r in results}
    assert by_rule["agents"] is True and by_rule["hidden"] is True and by_rule["tools"] is True
    assert by_rule["expert"] is None  # a game has no expert that wins every game


def test_self_play_alternates_agents_and_hides_the_other_card():
    env = envs.make("KuhnPoker-v0")
    obs, info = env.reset(seed=3)
    assert is_multiagent(info) and agent_problem(info) is None
    assert info["agent"] == "player_0" and info["seats"] == ["player_0", "player_1"]
    deal = env.state.history()[:2]  # the two cards OpenSpiel dealt from the seed
    assert "JQK"[deal[0]] in obs and f"Your card: {'JQK'[deal[1]]}" not in obs
    obs, r, term, _t, info = env.step("Bet")
    assert info["agent"] == "player_1" and f"Your card: {'JQK'[deal[1]]}" in obs
    assert info["state_key"] == ("player_1", env.state.information_state_string(1))
    obs, r, term, _t, info = env.step("Pass")  # player 1 folds: player 0 takes the ante
    assert term and info["agent"] is None
    assert info["rewards"] == {"player_0": 1.0, "player_1": -1.0} and r == -1.0
    assert info["agent_won"] == {"player_0": True, "player_1": False}
    assert info["won"] is True  # seats[0]'s outcome


def test_bot_seats_and_replay():
    a, b = (
        envs.make("TicTacToe-v0", opponent="mcts:5"),
        envs.make("TicTacToe-v0", opponent="mcts:5"),
    )
    oa, ia = a.reset(seed=7)  # seed 7: the caller plays seat 1, the bot opened
    ob, ib = b.reset(seed=7)
    assert ia["seats"] == ["player_1"] and ia["agent"] == "player_1"
    assert oa == ob and "x" in oa.split("\n", 2)[2]
    for _ in range(4):
        act = ia["admissible_actions"][0]
        oa, _r, term, _t, ia = a.step(act)
        ob, _r, _term, _t, ib = b.step(act)
        assert oa == ob and ia["state_key"] == ib["state_key"]  # the bot replays from the seed
        if term:
            break
    with pytest.raises(ValueError, match="MCTS bot plays sequential perfect-information"):
        envs.make("KuhnPoker-v0", opponent="mcts:10")
    with pytest.raises(ValueError, match="unknown opponent"):
        envs.make("TicTacToe-v0", opponent="alphazero")


def test_held_out_tasks_name_opponent_and_seat():
    env = envs.make("TicTacToe-v0", eval_opponents=["random", "mcts:3"])
    ids = env.task_ids("test", 4)
    assert ids == [
        "random@0#1000000000",
        "mcts:3@0#1000000001",
        "random@1#1000000002",
        "mcts:3@1#1000000003",
    ]
    _obs, info = env.reset(options={"task_id": ids[3]})
    assert info["seats"] == ["player_1"] and info["task_id"] == ids[3]
    with pytest.raises(ValueError, match="is not"):
        env.reset(options={"task_id": "nonsense"})


def test_simultaneous_round_hides_the_first_choice():
    env = envs.make("Goofspiel-v0")
    obs0, info = env.reset(seed=0)
    assert info["agent"] == "player_0"
    obs1, r, term, _t, info = env.step(info["admissible_actions"][-1])
    assert info["agent"] == "player_1" and r == 0.0 and not term
    assert "Bid: 4" not in obs1 and "P1 hand: 1 2 3 4" in obs1  # nothing of player 0's bid


class Leaky(OpenSpielEnv):
    """Kuhn poker that shows each player the opponent's card too (a contract break)."""

    def __init__(self):
        super().__init__("kuhn_poker")
        self._describe = lambda state, player: f"cards {state.history()[:2]}"


class Miscounting(OpenSpielEnv):
    """Kuhn poker whose scalar reward is not the acting agent's."""

    def step(self, action):
        obs, r, term, trunc, info = super().step(action)
        return obs, r + 1.0, term, trunc, info


def test_hidden_rule_catches_a_leak():
    (hidden,) = check_contract(Leaky, seeds=(0,), rules=["hidden"])
    assert hidden.ok is False and "reveals what the agent cannot know" in hidden.detail


def test_agents_rule_catches_a_wrong_reward():
    (agents,) = check_contract(Miscounting, seeds=(0,), rules=["agents"])
    assert agents.ok is False and "is not the acting agent" in agents.detail


def test_single_agent_envs_skip_the_multi_agent_rules():
    results = check_contract(
        lambda: envs.make("FrozenLake-v0"), seeds=(0,), rules=["agents", "hidden"]
    )
    assert [r.ok for r in results] == [None, None]


def test_a_pool_of_opponents_is_drawn_per_training_game():
    env = envs.make("TicTacToe-v0", opponent=["self", "random", "mcts:3"])
    drawn = {env.reset(seed=s)[1]["task_id"].split("#")[0].split("@")[0] for s in range(30)}
    assert drawn == {"self", "random", "mcts:3"}
    again = [
        envs.make("TicTacToe-v0", opponent=["self", "random"]).reset(seed=s)[1]["task_id"]
        for s in range(5)
    ]
    assert again == [
        envs.make("TicTacToe-v0", opponent=["self", "random"]).reset(seed=s)[1]["task_id"]
        for s in range(5)
    ]
