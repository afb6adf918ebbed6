"""The one episode loop (agentrl.episodes) on real Sokoban envs: refill, cuts, caps, records."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentrl.episodes import Episode, Move, ResetError, Turn, play_episodes
from agentrl.pool import EnvPool, EnvSpec, ResetSpec

SMALL = {"dim_room": 5, "num_boxes": 1, "open_room": True, "search_depth": 1, "max_steps": 10}


def _pool(n: int) -> EnvPool:
    return EnvPool([EnvSpec("Sokoban-v0", SMALL)] * n, num_workers=0)


class Expert:
    """The env's expert, except where ``cut`` or ``garble`` say otherwise (by spec index)."""

    def __init__(self, pool, cut=(), garble=()):
        self.pool, self.cut, self.garble = pool, set(cut), set(garble)
        self.started: list[int] = []
        self.steps: list[int] = []

    def start(self, episodes):
        self.started += [ep.result.traj for ep in episodes]

    def act(self, episodes, step, first_request):
        self.steps.append(step)
        experts = self.pool.call([ep.slot for ep in episodes], "expert_action")
        moves = []
        for ep, a in zip(episodes, experts):
            k = ep.result.traj
            if k in self.cut:
                moves.append(Move("", None, cut="prompt too long"))
            elif k in self.garble:
                moves.append(Move(a, None, f"<garbled>{a}"))  # the env gets a, but unparsed
            else:
                moves.append(Move(a, a, f"<action>{a}</action>"))
        return moves


def test_refill_cuts_and_records_in_spec_order():
    pool = _pool(2)
    policy = Expert(pool, cut={1}, garble={2})
    resets = [ResetSpec(k, seed=10 + k) for k in range(5)]
    finished: list[Episode] = []
    try:
        results = play_episodes(pool, policy, resets, width=2, on_finish=finished.append)
    finally:
        pool.close()
    assert [r.traj for r in results] == list(range(5)) and sorted(policy.started) == list(range(5))
    cut = results[1]
    assert cut.truncated and not cut.terminated and cut.error == "prompt too long" and not cut.steps
    for k in (0, 2, 3, 4):
        assert results[k].won and results[k].terminated and not results[k].truncated
        assert [s.valid for s in results[k].steps] == [k != 2] * len(results[k].steps)
    assert sorted(ep.result.traj for ep in finished) == list(range(5))
    ep = next(e for e in finished if e.result.traj == 2)
    assert ep.steps == len(ep.history) == len(ep.result.steps)
    first = ep.history[0]
    assert (
        isinstance(first, Turn) and first.action is None and first.response.startswith("<garbled>")
    )
    assert first.observation == ep.result.steps[0].observation and first.info["action_valid"]


def test_step_cap_ends_episodes_truncated():
    class Left:
        def start(self, episodes):
            pass

        def act(self, episodes, step, first_request):
            return [Move("left", "left", "left") for _ in episodes]

    pool = _pool(3)
    try:
        results = play_episodes(pool, Left(), [ResetSpec(0, seed=1)] * 3, max_steps=2)
    finally:
        pool.close()
    for r in results:
        assert len(r.steps) <= 2 and (r.terminated or (r.truncated and len(r.steps) == 2))
    assert all(r.task_id == results[0].task_id for r in results)  # one group, one start state


def test_bad_policies_specs_and_resets_are_errors():
    class Silent:
        def start(self, episodes):
            pass

        def act(self, episodes, step, first_request):
            return []

    pool = _pool(2)
    try:
        with pytest.raises(ValueError, match="0 moves for 2 episodes"):
            play_episodes(pool, Silent(), [ResetSpec(0, seed=1)] * 2)
        with pytest.raises(ValueError, match="3 episodes for a pool of 2"):
            play_episodes(pool, Silent(), [ResetSpec(0, seed=1)] * 3)
        with pytest.raises(ValueError, match="max_steps"):
            play_episodes(pool, Silent(), [ResetSpec(0, seed=1)], max_steps=0)
        bad = [ResetSpec(0, seed=1), ResetSpec(1, seed=1, options={"task_id": "no-such-task"})]
        with pytest.raises(ResetError) as err:
            play_episodes(pool, Silent(), bad, tasks=["first", "second"])
        assert err.value.tasks == ["first", "second"] and isinstance(err.value, RuntimeError)
    finally:
        pool.close()


def test_the_loop_and_the_step_by_step_evaluation_import_no_torch():
    code = (
        "import sys, agentrl.episodes, agentrl.evaluation.runner, agentrl.evaluation.agents\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
