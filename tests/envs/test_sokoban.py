"""Sokoban: generation, rules, rewards, expert, and robustness to any action text."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from agentrl.envs.sokoban import ACTIONS, Layout, SokobanEnv, State, generate_room, parse, render
from agentrl.envs.sokoban.room import move
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl import envs

ROOM = """
#####
#P_O#
#_X_#
#___#
#####
"""


def brute_force_plan_length(layout: Layout, state: State, limit: int) -> int | None:
    """Fewest moves to solve by plain BFS over (player, boxes): the solver's ground truth."""
    seen = {state}
    queue = deque([(state, 0)])
    while queue:
        s, d = queue.popleft()
        if s.boxes <= layout.targets:
            return d
        if d == limit:
            continue
        for a in range(4):
            n, _ = move(layout, s, a)
            if n not in seen:
                seen.add(n)
                queue.append((n, d + 1))
    return None


def test_render_parse_round_trip_and_symbols():
    layout, state = parse(ROOM)
    assert render(layout, state) == ROOM.strip()
    on_target = State(layout.width * 1 + 3, frozenset({layout.width * 2 + 2}))
    # Player on the target shows S; box off target X.
    assert "S" in render(layout, on_target)
    layout2, state2 = parse("####\n#P√#\n####")
    assert render(layout2, state2) == "####\n#P√#\n####"


def test_rewards_follow_gym_sokoban():
    env = SokobanEnv()
    _, info = env.reset(options={"room": "######\n#P_XO#\n######"})
    assert (
        info["optimal_steps"] == 2
        and info["category"] == "3x6-1box"
        and info["task_id"] == "custom"
    )
    _, r, term, trunc, info = env.step("right")  # walk: step penalty only
    assert r == pytest.approx(-0.1) and not term
    _, r, term, trunc, info = env.step("right")  # push the box onto the target: -0.1 + 1 + 10
    assert r == pytest.approx(10.9) and term and info["won"] and info["score"] == 1.0
    assert info["milestones"] == ("box_on_target_1",)


def test_box_off_target_costs_one():
    env = SokobanEnv()
    # Two boxes: one already on a target (√), one to go. Pushing the √ box off costs -1.
    _, info = env.reset(options={"room": "#######\n#P√_O_#\n#_____#\n#__X__#\n#_____#\n#######"})
    assert info["score"] == 0.5 and info["milestones"] == ("box_on_target_1",)
    _, r, term, _, info = env.step("right")
    assert r == pytest.approx(-1.1) and not term and info["score"] == 0.0


def test_unsolvable_custom_room_is_rejected():
    with pytest.raises(ValueError, match="no solution"):
        SokobanEnv().reset(options={"room": "####\n#XP#\n#O_#\n####"})  # box stuck in a corner


def test_same_seed_same_room_and_task_id_replays():
    env1, env2 = SokobanEnv(), SokobanEnv()
    obs1, info1 = env1.reset(seed=123)
    obs2, info2 = env2.reset(seed=123)
    assert obs1 == obs2 and info1["state_key"] == info2["state_key"]
    obs3, info3 = env2.reset(options={"task_id": info1["task_id"]})
    assert obs3 == obs1 and info3["task_id"] == "123"
    assert SokobanEnv().reset(seed=124)[0] != obs1 or SokobanEnv().reset(seed=125)[0] != obs1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"dim_room": 6, "num_boxes": 1, "max_steps": 15},
        {"dim_room": 5, "num_boxes": 1, "max_steps": 10, "open_room": True, "search_depth": 1},
        {"dim_room": 7, "num_boxes": 2, "max_steps": 30},
    ],
)
def test_expert_solves_200_rooms_within_the_cap(kwargs):
    env = envs.make("Sokoban-v0", **kwargs)
    for seed in range(200):
        _, info = env.reset(seed=seed)
        optimal, steps = info["optimal_steps"], 0
        assert 1 <= optimal <= env.max_steps
        terminated = truncated = False
        while not (terminated or truncated):
            _, _, terminated, truncated, info = env.step(env.expert_action())
            steps += 1
        assert info["won"], f"expert failed on seed {seed}"
        assert steps == optimal, f"expert took {steps} moves, optimal is {optimal} (seed {seed})"


def test_solver_is_optimal_against_brute_force():
    for seed in range(40):
        room = generate_room(np.random.default_rng(seed), (6, 6), num_boxes=2, max_steps=20)
        assert len(room.solution) == brute_force_plan_length(room.layout, room.state, 20)


def test_expert_replans_after_a_detour():
    env = SokobanEnv(max_steps=40)
    env.reset(seed=7)
    for a in ("up", "left", "up", "left"):
        env.step(a)
    assert env.expert_action() == env.expert_action()  # asking twice changes nothing
    while True:
        _, _, terminated, truncated, info = env.step(env.expert_action())
        if terminated or truncated:
            break
    assert info["won"] or env._solver.solve(env.state) is None  # unless the detour deadlocked


def test_state_key_is_the_true_state_not_the_text():
    env = SokobanEnv()
    room = "######\n#P___#\n#__X_#\n#___O#\n######"
    _, info0 = env.reset(options={"room": room})
    # A wall bump is a no-op: same state, same key.
    assert env.step("up")[4]["state_key"] == info0["state_key"]
    # The same cell reached by two different paths gives the same key.
    a = env.step("right")[4]["state_key"]
    b = env.step("down")[4]["state_key"]
    env.reset(options={"room": room})
    env.step("down")
    assert env.step("right")[4]["state_key"] == b != a


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.text(max_size=50),
        st.sampled_from(
            ["", "UP!!", "<action>up</action>", "x" * 10_000, "ｕｐ", "up down", " LEFT\n"]
        ),
    )
)
def test_any_action_text_never_raises(action):
    env = SokobanEnv()
    _, info0 = env.reset(seed=1)
    _, reward, _, _, info = env.step(action)
    if not info["action_valid"]:
        assert info["state_key"] == info0["state_key"]
        assert reward == pytest.approx(-0.1)
    else:
        assert action.strip().lower() in ACTIONS


def test_episode_truncates_at_the_step_cap():
    env = SokobanEnv(max_steps=3)
    env.reset(seed=0)
    flags = [env.step("nonsense")[3] for _ in range(3)]
    assert flags == [False, False, True]


def test_bad_settings_fail_clearly():
    with pytest.raises(ValueError, match="max_steps"):
        SokobanEnv(max_steps=0)
    with pytest.raises(ValueError, match="task_id"):
        SokobanEnv().reset(options={"task_id": "not-a-number"})
    with pytest.raises(ValueError, match="dim_room"):
        generate_room(np.random.default_rng(0), (2, 2))


def test_task_ids_are_fixed_and_disjoint_from_training_seeds():
    env = SokobanEnv()
    test_ids = env.task_ids("test", limit=5)
    assert test_ids == env.task_ids("test", limit=5)
    assert all(int(t) >= SokobanEnv.TEST_SEED_OFFSET for t in test_ids)
    with pytest.raises(ValueError, match="splits"):
        env.task_ids("valid")


def test_hand_written_rooms_are_bounded_in_size_and_solver_effort():
    """What a client writes costs a bounded time: a room over max_room_cells is refused before
    it is solved, a hard one when the solver's node budget runs out."""
    import time

    big = "\n".join(["#" * 11] + ["#P" + "_" * 8 + "#"] + ["#" + "_" * 9 + "#"] * 8 + ["#" * 11])
    with pytest.raises(ValueError, match="121 cells, over max_room_cells=100"):
        SokobanEnv().reset(options={"room": big})
    hard = "\n".join(["#########", "#P______#", "#_X_X_X_#", "#_______#", "#_X_X_X_#",
                      "#_O_O_O_#", "#_O_O_O_#", "#########"])  # fmt: skip
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="no solution within solver_nodes=200"):
        SokobanEnv(solver_nodes=200).reset(options={"room": hard})
    assert time.monotonic() - t0 < 5
