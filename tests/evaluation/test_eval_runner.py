"""Task lists, the episode runner and the baseline agents, on real Sokoban/FrozenLake envs."""

from __future__ import annotations

import numpy as np
import pytest
from eval_envs import SMALL, dying

from agentrl import envs
from agentrl.evaluation import summarize
from agentrl.evaluation.agents import ExpertAgent, RandomAgent
from agentrl.evaluation.runner import Action, EvaluationError, play_tasks
from agentrl.evaluation.tasks import EvalTask, derive_seed, eval_resets, make_tasks
from agentrl.rollout import ResetSpec

SOK = "Sokoban-v0"


def test_derive_seed_is_pinned():
    # A change here silently changes every published evaluation: keep these values.
    assert derive_seed(0, 0) == int(np.random.SeedSequence([0, 0]).generate_state(1)[0])
    assert [derive_seed(0, k) for k in range(3)] == [derive_seed(0, k) for k in range(3)]
    assert len({derive_seed(s, k) for s in range(5) for k in range(50)}) == 250


def test_tasks_from_split():
    tasks = make_tasks(SOK, SMALL, split="test", episodes=5, seed=3)
    assert [t.task_id for t in tasks] == [str(1_000_000_000 + i) for i in range(5)]
    assert [t.index for t in tasks] == list(range(5))
    assert [t.agent_seed for t in tasks] == [derive_seed(3, k) for k in range(5)]
    assert tasks[0].reset_args() == (tasks[0].seed, {"task_id": "1000000000"})
    assert make_tasks(SOK, SMALL, split="test", episodes=5, seed=3) == tasks


def test_tasks_repeats_and_explicit_ids():
    tasks = make_tasks(SOK, task_ids=["7", "9"], repeats=3, seed=0)
    assert [t.task_id for t in tasks] == ["7", "7", "7", "9", "9", "9"]
    assert len({t.agent_seed for t in tasks}) == 6
    assert [t.task_id for t in make_tasks(SOK, task_ids=["7", "9", "11"], episodes=2)] == ["7", "9"]


def test_tasks_by_seed_for_envs_without_ids():
    tasks = make_tasks("FrozenLake-v0", episodes=4, seed_base=100, seed=1)
    assert [t.task_id for t in tasks] == [None] * 4
    assert [t.seed for t in tasks] == [100, 101, 102, 103]
    assert tasks[2].reset_args() == (102, None)


def test_split_ids_from_a_given_lister_and_a_short_split_is_an_error():
    calls = []

    def lister(split, limit):
        calls.append((split, limit))
        return ["a", "b", "c"][: limit or 3]

    tasks = make_tasks("NoSuchEnv-v0", split="held", episodes=2, seed=4, list_task_ids=lister)
    assert calls == [("held", 2)] and [t.task_id for t in tasks] == ["a", "b"]
    # task-id tasks are reset with a seed too (the same rule for the trainer and agentrl.evaluate)
    assert [t.seed for t in tasks] == [derive_seed(4, 0), derive_seed(4, 1)]
    with pytest.raises(ValueError, match=r"lists 3 tasks, fewer than the 5 .*env\.eval_episodes"):
        make_tasks("NoSuchEnv-v0", split="held", episodes=5, list_task_ids=lister)


def test_eval_resets_play_each_task_with_its_seed_and_id():
    by_id = make_tasks(SOK, SMALL, split="test", episodes=2, seed=1)
    assert eval_resets(by_id) == [
        ResetSpec(0, seed=by_id[0].seed, options={"task_id": "1000000000"}),
        ResetSpec(1, seed=by_id[1].seed, options={"task_id": "1000000001"}),
    ]
    by_seed = make_tasks("FrozenLake-v0", episodes=2, seed_base=50)
    assert eval_resets(by_seed) == [ResetSpec(0, seed=50), ResetSpec(1, seed=51)]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"split": "valid"}, "splits"),
        ({"split": "test", "episodes": 0}, "episodes"),
        ({"episodes": 3}, "seed_base"),
        ({"task_ids": []}, "empty"),
        ({"task_ids": ["1"], "repeats": 0}, "repeats"),
    ],
)
def test_bad_task_lists(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_tasks(SOK, SMALL, **kwargs)


def test_expert_solves_every_task():
    tasks = make_tasks(SOK, SMALL, split="test", episodes=30)
    recs = play_tasks(SOK, tasks, ExpertAgent(), env_kwargs=SMALL, num_envs=7)
    assert [r.task_id for r in recs] == [t.task_id for t in tasks]
    assert all(
        r.won and r.score == 1.0 and not r.truncated and r.invalid_actions == 0 for r in recs
    )
    # The expert is optimal: its step count is the room's plan length.
    for t, r in zip(tasks, recs):
        env = envs.make(SOK, **SMALL)
        _, info = env.reset(options={"task_id": t.task_id})
        assert r.steps == info["optimal_steps"]


def _replay_random(task: EvalTask, max_steps: int):
    """The random agent's episode recomputed by hand: uniform over the admissible actions with
    a generator seeded by the task's agent seed."""
    env = envs.make(SOK, **SMALL)
    rng = np.random.default_rng(task.agent_seed)
    _, info = env.reset(seed=task.seed, options={"task_id": task.task_id})
    steps, total = 0, 0.0
    while True:
        acts = info["admissible_actions"]
        _, reward, term, trunc, info = env.step(acts[int(rng.integers(len(acts)))])
        steps += 1
        total += reward
        if term or trunc or steps >= max_steps:
            return info["won"], steps, total, trunc or (steps >= max_steps and not term)


def test_random_agent_matches_hand_replay():
    tasks = make_tasks(SOK, SMALL, split="test", episodes=12, seed=5)
    recs = play_tasks(SOK, tasks, RandomAgent(), env_kwargs=SMALL, num_envs=4, max_steps=6)
    for t, r in zip(tasks, recs):
        won, steps, total, trunc = _replay_random(t, 6)
        assert (r.won, r.steps, r.truncated) == (won, steps, trunc and not won)
        assert r.total_reward == pytest.approx(total)
        assert r.steps <= 6 and r.seed == t.seed and r.agent_seed == t.agent_seed


def test_results_do_not_depend_on_scheduling():
    tasks = make_tasks(SOK, SMALL, split="test", episodes=24, seed=1)
    a = play_tasks(SOK, tasks, RandomAgent(), env_kwargs=SMALL, num_envs=3, num_workers=0)
    b = play_tasks(SOK, tasks, RandomAgent(), env_kwargs=SMALL, num_envs=8, num_workers=2)
    assert a == b
    other_seed = play_tasks(
        SOK,
        make_tasks(SOK, SMALL, split="test", episodes=24, seed=2),
        RandomAgent(),
        env_kwargs=SMALL,
        num_envs=8,
    )
    assert [r.steps for r in other_seed] != [r.steps for r in a]


class Scripted:
    """Answers with a fixed action per step index (cycled); optional failure."""

    name = "scripted"

    def __init__(self, actions, fail_at_call=None):
        self.actions, self.calls, self.fail_at_call = actions, 0, fail_at_call

    def act(self, episodes, pool):
        self.calls += 1
        if self.fail_at_call is not None and self.calls >= self.fail_at_call:
            raise ConnectionError("endpoint down")
        return [self.actions[ep.steps % len(self.actions)] for ep in episodes]

    def close(self):
        pass


def test_invalid_and_unparsed_steps_are_counted():
    tasks = make_tasks(SOK, SMALL, split="test", episodes=3)
    recs = play_tasks(SOK, tasks, Scripted(["jump"]), env_kwargs=SMALL, max_steps=4)
    for r in recs:
        assert (r.steps, r.invalid_actions, r.truncated, r.won) == (4, 4, True, False)
        assert r.total_reward == pytest.approx(4 * -0.1)  # the env's step penalty only
    # "left" then "right" are valid moves for the env, but flagged unparsed by the agent.
    unparsed = Scripted([Action("left", "<garbage>", parsed=False), Action("right", "ok")])
    recs = play_tasks(SOK, tasks, unparsed, env_kwargs=SMALL, max_steps=4)
    assert [r.invalid_actions for r in recs if r.steps == 4] == [2] * sum(
        r.steps == 4 for r in recs
    )
    rep = summarize(recs)
    assert rep.overall.invalid_actions == sum(r.invalid_actions for r in recs)


def test_dead_worker_cuts_one_episode_and_the_run_goes_on():
    tasks = make_tasks(SOK, SMALL, split="test", episodes=6)

    class DieOnThird:
        name = "die-on-third"
        expert = ExpertAgent()

        def act(self, episodes, pool):
            acts = self.expert.act(episodes, pool)
            return ["die" if ep.task.index == 2 else a for ep, a in zip(episodes, acts)]

        def close(self):
            pass

    recs = play_tasks(SOK, tasks, DieOnThird(), env_fn=dying, num_envs=2, num_workers=2)
    assert [r.task_id for r in recs] == [t.task_id for t in tasks]
    assert recs[2].error is not None and recs[2].truncated and not recs[2].won
    assert all(r.won and r.error is None for k, r in enumerate(recs) if k != 2)
    assert summarize(recs).overall.errors == 1


def test_agent_failure_keeps_finished_episodes():
    tasks = make_tasks(SOK, SMALL, split="test", episodes=6)
    with pytest.raises(EvaluationError, match="endpoint down") as err:
        play_tasks(
            SOK,
            tasks,
            Scripted(["up", "down"], fail_at_call=6),
            env_kwargs=SMALL,
            num_envs=2,
            max_steps=2,
        )
    # 5 calls of 2 steps each on 2 envs: the first 4 episodes (2 rounds of 2) finished.
    assert [r.task_id for r in err.value.records] == [t.task_id for t in tasks[:4]]


def test_random_agent_open_action_space():
    from agentrl.evaluation.runner import Episode

    ep = Episode(
        make_tasks(SOK, task_ids=["1"])[0],
        0,
        "obs",
        {"admissible_actions": None},
        np.random.default_rng(0),
        first_info={"instruction": "buy a red mug"},
    )
    with pytest.raises(ValueError, match="open_action"):
        RandomAgent().act([ep], None)
    assert RandomAgent("search[{instruction}]").act([ep], None) == ["search[buy a red mug]"]


def test_bad_runner_arguments():
    tasks = make_tasks(SOK, SMALL, split="test", episodes=2)
    with pytest.raises(ValueError, match="num_envs"):
        play_tasks(SOK, tasks, RandomAgent(), num_envs=0)
    with pytest.raises(ValueError, match="not 'FrozenLake-v0'"):
        play_tasks("FrozenLake-v0", tasks, RandomAgent())
    assert play_tasks(SOK, [], RandomAgent()) == []


def test_random_agent_fills_templates():
    from agentrl.evaluation.runner import Episode

    ep = Episode(
        make_tasks(SOK, task_ids=["1"])[0],
        0,
        "obs",
        {"admissible_actions": ["search[<your query>]"]},
        np.random.default_rng(0),
        first_info={"instruction": "a red mug"},
    )
    assert RandomAgent().act([ep], None) == ["search[a red mug]"]
    assert RandomAgent(fill_templates=False).act([ep], None) == ["search[<your query>]"]
