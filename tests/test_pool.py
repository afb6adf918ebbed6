"""The env pool: groups start from one state, results match in-process, failures are contained."""

from __future__ import annotations

import os
import signal

import pytest
from pool_envs import fragile

from agentrl.pool import EnvPool, EnvSpec

SPEC = EnvSpec("Sokoban-v0", {"dim_room": 6, "max_steps": 15})


@pytest.mark.parametrize("workers", [0, 2])
def test_group_members_start_from_the_same_state(workers):
    with EnvPool([SPEC] * 8, num_workers=workers) as pool:
        out = pool.reset(seeds=[5] * 4 + [6] * 4)
        keys = [info["state_key"] for _, info in out]
        obs = [o for o, _ in out]
        assert len(set(keys[:4])) == 1 and len(set(keys[4:])) == 1
        assert len(set(obs[:4])) == 1 and obs[0] != obs[4]
        assert len({info["task_id"] for _, info in out[:4]}) == 1


def test_workers_give_the_same_results_as_in_process():
    actions = ["up", "left", "down", "right", "bad", "UP"]
    traces = []
    for workers in (0, 2):
        with EnvPool([SPEC] * 4, num_workers=workers) as pool:
            pool.reset(seeds=[0, 1, 2, 3])
            trace = []
            for a in actions:
                trace += [
                    (r.observation, r.reward, r.terminated, r.truncated, r.info["state_key"])
                    for r in pool.step(range(4), [a] * 4)
                ]
            trace.append(pool.call(None, "expert_action"))
            traces.append(trace)
    assert traces[0] == traces[1]


def test_a_killed_worker_is_restarted_and_its_episodes_end_truncated():
    with EnvPool([SPEC] * 4, num_workers=2) as pool:
        pool.reset(seeds=[0, 1, 2, 3])
        os.kill(pool.worker_pids()[0], signal.SIGKILL)
        results = pool.step([0, 1, 2, 3], ["up"] * 4)
        # Worker 0 held envs 0 and 2.
        for i in (0, 2):
            assert results[i].truncated and not results[i].terminated
            assert "killed by SIGKILL" in results[i].info["error"]
            assert results[i].info["task_id"] == str(i)  # the last known info is kept
        for i in (1, 3):
            assert "error" not in results[i].info
        assert pool.restarts == 1
        # Until reset, the cut episodes stay cut; after reset, they run normally again.
        assert pool.step([0], ["up"])[0].truncated
        pool.reset([0, 2], seeds=[0, 2])
        assert all("error" not in r.info for r in pool.step([0, 1, 2, 3], ["up"] * 4))


def test_a_worker_that_exits_mid_step_is_contained():
    with EnvPool([fragile] * 2, num_workers=2) as pool:
        pool.reset(seeds=[0, 1])
        results = pool.step([0, 1], ["die", "up"])
        assert results[0].truncated and "exit code 3" in results[0].info["error"]
        assert not results[1].truncated
        pool.reset([0], seeds=[0])
        assert not pool.step([0], ["up"])[0].truncated


@pytest.mark.parametrize("workers", [0, 1])
def test_an_env_exception_ends_only_that_episode(workers):
    with EnvPool([fragile] * 2, num_workers=workers) as pool:
        pool.reset(seeds=[0, 1])
        results = pool.step([0, 1], ["raise", "up"])
        assert results[0].truncated and "RuntimeError: boom" in results[0].info["error"]
        assert not results[1].truncated and "error" not in results[1].info


def test_a_hanging_worker_times_out_and_is_replaced():
    with EnvPool([fragile], num_workers=1, step_timeout=1.0) as pool:
        pool.reset(seeds=[0])
        result = pool.step([0], ["sleep"])[0]
        assert result.truncated and "timed out" in result.info["error"]
        pool.reset([0], seeds=[0])
        assert not pool.step([0], ["up"])[0].truncated


def test_bad_calls_fail_clearly():
    with EnvPool([SPEC] * 2) as pool:
        with pytest.raises(IndexError, match="out of range"):
            pool.step([5], ["up"])
        with pytest.raises(ValueError, match="distinct"):
            pool.step([0, 0], ["up", "up"])
        with pytest.raises(ValueError, match="actions"):
            pool.step([0, 1], ["up"])
        with pytest.raises(RuntimeError, match="reset of env 0 failed"):
            pool.reset([0], options=[{"task_id": "not-a-seed"}])
