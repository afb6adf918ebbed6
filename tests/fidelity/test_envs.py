"""The tabular models agree with the environments they stand for."""

import numpy as np
import pytest
from agentrl.envs.sokoban import ACTIONS, SokobanEnv, parse

from agentrl.fidelity.mdp import distance_to_win, evaluate_policy
from agentrl.fidelity.pickplace import PickPlaceTask, action_slots, make_task, pickplace_mdp
from agentrl.fidelity.policies import uniform_policy
from agentrl.fidelity.sokoban import room_mdp, sokoban_tasks


@pytest.mark.parametrize(("seed", "boxes"), [(0, 1), (7, 1), (123, 1), (5, 2), (9, 2)])
def test_sokoban_tables_replay_the_env(seed, boxes):
    """Random walks in SokobanEnv and in the table give the same states, rewards and ends."""
    env = SokobanEnv(dim_room=(6, 6), num_boxes=boxes, max_steps=15)
    mdp = sokoban_tasks([seed], (6, 6), boxes, 15)[0]
    index = {k: i for i, k in enumerate(mdp.state_keys)}
    rng = np.random.default_rng(seed)
    for _ in range(30):
        _, info = env.reset(seed=seed)
        s = int(mdp.start[0])
        assert mdp.state_keys[s] == info["state_key"]
        n_on = len(info["milestones"])
        for t in range(mdp.horizon):
            a = int(rng.integers(4))
            _, reward, terminated, truncated, info = env.step(ACTIONS[a])
            assert mdp.reward[s, a] == pytest.approx(reward)
            assert bool(mdp.done[s, a]) == terminated
            assert bool(mdp.won[s, a]) == info["won"]
            assert mdp.milestone[s, a] == max(0, len(info["milestones"]) - n_on)
            n_on = len(info["milestones"])
            assert truncated == (not terminated and t == mdp.horizon - 1)
            if terminated:
                break
            s = int(mdp.next_state[s, a])
            assert s == index[info["state_key"]]


def test_corridor_room_by_hand():
    # #####
    # #PXO#   one push right solves: -0.1 + 1 + 10 = 10.9; every other move costs -0.1.
    # #####
    layout, state = parse("#####\n#PXO#\n#####")
    mdp = room_mdp(layout, state, horizon=1)
    assert mdp.num_states == 2  # the start and the solved state
    np.testing.assert_allclose(mdp.reward[0], [-0.1, -0.1, -0.1, 10.9])
    v = evaluate_policy(mdp, uniform_policy(mdp))
    assert v.V[1, 0] == pytest.approx(0.25 * 10.9 + 0.75 * -0.1)


def test_pickplace_by_hand():
    task = PickPlaceTask(
        ("countertop 1", "fridge 1"), (False, True), "apple", obj_start=1, target=0
    )
    mdp = pickplace_mdp(task, horizon=8)
    slots = action_slots(2)
    start = int(mdp.start[0])
    # At the start: look, inventory and the two go-tos; the apple is in the closed fridge.
    assert [slots[a] for a in np.flatnonzero(mdp.mask[start])] == [
        "look",
        "inventory",
        "go to #0",
        "go to #1",
    ]
    # go to fridge, open fridge, take apple, go to countertop, put apple: 5 steps.
    assert distance_to_win(mdp)[start] == 5
    s = start
    for cmd in ("go to #1", "open #1", "take #1", "go to #0", "put #0"):
        a = slots.index(cmd)
        assert mdp.mask[s, a], cmd
        if cmd == "put #0":
            assert mdp.won[s, a] and mdp.reward[s, a] == 10.0 and mdp.milestone[s, a] == 1
        elif cmd == "take #1":
            assert mdp.milestone[s, a] == 1 and mdp.reward[s, a] == 0.0
        s = int(mdp.next_state[s, a])
    assert task.command("take #1") == "take apple 1 from fridge 1"
    assert task.instruction == "put some apple in countertop 1"


def test_pickplace_take_needs_an_open_receptacle():
    task = PickPlaceTask(("drawer 1", "shelf 1"), (True, False), "mug", obj_start=0, target=1)
    mdp = pickplace_mdp(task)
    slots = action_slots(2)
    at_drawer = int(mdp.next_state[0, slots.index("go to #0")])
    assert not mdp.mask[at_drawer, slots.index("take #0")]
    opened = int(mdp.next_state[at_drawer, slots.index("open #0")])
    assert mdp.mask[opened, slots.index("take #0")]
    assert (
        not mdp.mask[opened, slots.index("open #0")] and mdp.mask[opened, slots.index("close #0")]
    )


def test_pickplace_generation_is_seeded():
    a = make_task(np.random.default_rng(3), 4)
    b = make_task(np.random.default_rng(3), 4)
    assert a == b and a.obj_start != a.target and len(set(a.receptacles)) == 4
    with pytest.raises(ValueError):
        make_task(np.random.default_rng(0), 1)
