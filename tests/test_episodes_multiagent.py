"""The episode loop with several agents in one episode (real OpenSpiel games): each agent's steps
and rewards (the opponent's winning move pays the loser's last move), one trajectory per agent
in the step batch with groups kept per role, and prompts that show an agent its own turns only."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.episodes import AGENT_STRIDE, Move, Turn, agent_views, play_episodes
from agentrl.pool import EnvPool, EnvSpec, ResetSpec
from agentrl.rollout.batch import to_step_batch

pytest.importorskip("pyspiel")

#: x plays the top row, o the middle row: x wins on its third move (the 5th of the game).
SCRIPT = ["x(0,0)", "o(1,0)", "x(0,1)", "o(1,1)", "x(0,2)"]


class Script:
    """Plays SCRIPT move by move (whoever acts), recording what each step's episode showed."""

    def __init__(self):
        self.seen: list[tuple[str | None, int]] = []

    def start(self, episodes):
        pass

    def act(self, episodes, step, first_request):
        out = []
        for ep in episodes:
            self.seen.append((ep.agent, len(ep.own_history())))
            a = SCRIPT[ep.steps]
            out.append(Move(a, a, a, prompt_ids=[1], response_ids=[2, 3], logprobs=[-0.5, -0.5]))
        return out


def _play(n=2):
    pool = EnvPool([EnvSpec("TicTacToe-v0", {})] * n, num_workers=0)
    policy = Script()
    eps = play_episodes(pool, policy, [ResetSpec(g, seed=5) for g in range(n)], max_steps=12)
    return eps, policy


def test_each_agent_gets_its_own_steps_and_rewards():
    (ep, _), policy = _play()
    assert [s.agent for s in ep.steps] == ["player_0", "player_1"] * 2 + ["player_0"]
    # x's winning move pays x +1 and o's last move -1 (PettingZoo's cumulative rewards)
    assert [s.reward for s in ep.steps] == [0.0, 0.0, 0.0, -1.0, 1.0]
    assert ep.agent_won == {"player_0": True, "player_1": False}
    assert ep.agent_return == {"player_0": 1.0, "player_1": -1.0}
    assert ep.won is True and ep.seats == ["player_0", "player_1"]
    # each prompt showed the acting agent only its own earlier turns (two games step together)
    expected = [("player_0", 0), ("player_1", 0), ("player_0", 1), ("player_1", 1), ("player_0", 2)]
    assert policy.seen[::2] == expected


def test_agent_views_split_roles_into_their_own_groups():
    eps, _ = _play()
    views = agent_views(eps)
    assert [(v.agent, v.group, v.traj) for v in views] == [
        ("player_0", 0, 0),
        ("player_1", 1, 1),
        ("player_0", AGENT_STRIDE, AGENT_STRIDE),
        ("player_1", AGENT_STRIDE + 1, AGENT_STRIDE + 1),
    ]
    assert [len(v.steps) for v in views] == [3, 2, 3, 2]
    assert [v.won for v in views] == [True, False, True, False]
    assert [v.score for v in views] == [1.0, 0.0, 1.0, 0.0]


def test_step_batch_has_one_trajectory_per_agent_and_names_it():
    eps, _ = _play()
    values = np.arange(10, dtype=np.float32)  # one per step in play order
    batch, seqs = to_step_batch(eps, values=values)
    assert batch.num_trajectories == 4 and batch.num_groups == 4
    assert list(batch.extras["agent"][:5]) == ["player_0"] * 3 + ["player_1"] * 2
    assert list(batch.extras["category"][:1]) == ["tic_tac_toe"]
    assert batch.t.tolist()[:5] == [0, 1, 2, 0, 1]
    assert batch.reward.tolist()[:5] == [0.0, 0.0, 1.0, 0.0, -1.0]
    assert batch.done.tolist()[:5] == [False, False, True, False, True]
    # the per-step inputs follow the rows: x's steps were 0, 2, 4 of the game, o's 1 and 3
    assert batch.value.tolist()[:5] == [0.0, 2.0, 4.0, 1.0, 3.0]
    assert [s.step_row for s in seqs] == list(range(len(batch)))


def test_single_agent_episodes_pass_unchanged():
    pool = EnvPool([EnvSpec("FrozenLake-v0", {})], num_workers=0)

    class Right:
        def start(self, episodes):
            pass

        def act(self, episodes, step, first_request):
            return [Move("right", "right") for _ in episodes]

    eps = play_episodes(pool, Right(), [ResetSpec(0, seed=0)], max_steps=3)
    assert agent_views(eps) == eps and eps[0].steps[0].agent is None
    assert Turn("o", "r").agent is None


def test_dynamic_sampling_sees_the_first_seats_return():
    from agentrl.training.iteration import _return_with_penalty

    (ep, _), _policy = _play()
    assert ep.total_reward == 0.0  # zero-sum: the agents' rewards cancel
    assert _return_with_penalty(ep, -0.1) == 1.0  # x won: its return, no invalid step
