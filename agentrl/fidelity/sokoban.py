"""Sokoban rooms as exact tabular MDPs (every state reachable from the start, enumerated).

The tables follow :class:`agentrl.envs.sokoban.SokobanEnv` exactly: the same rooms (drawn by
``reset(seed=task)``), the same moves (:func:`agentrl.envs.sokoban.room.move`), rewards (-0.1 per step,
+1 box onto a target, -1 box off a target, +10 solved, or the env's own settings), episode end on
solving and truncation at ``max_steps``. A milestone is a box newly pushed onto a target (the
env's ``milestones`` list growing). ``tests/fidelity`` checks the tables against the env step by
step.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from agentrl.envs.sokoban import ACTIONS, SokobanEnv
from agentrl.envs.sokoban.room import Layout, State, move

from .mdp import TabularMDP

__all__ = ["room_mdp", "sokoban_tasks"]


def room_mdp(
    layout: Layout,
    start: State,
    horizon: int,
    rewards: tuple[float, float, float, float] = (-0.1, 1.0, -1.0, 10.0),
    name: str = "room",
    max_states: int = 200_000,
) -> TabularMDP:
    """The MDP of one room: states reachable from ``start`` by breadth-first search over moves.

    ``rewards`` is (step penalty, box on target, box off target, solved), as ``SokobanEnv.rewards``.
    Solved states end the episode; their rows are never acted from (self-loops with reward 0).
    """
    step_penalty, box_on, box_off, solved_reward = rewards
    index: dict[State, int] = {start: 0}
    order = [start]
    queue = deque([start])
    rows: list[tuple[list[int], list[float], list[bool], list[int]]] = []
    while queue:
        s = queue.popleft()
        nxt, rew, won, ms = [], [], [], []
        if s.boxes <= layout.targets:  # solved: absorbing, never acted from
            rows.append(([index[s]] * 4, [0.0] * 4, [False] * 4, [0] * 4))
            continue
        for a in range(len(ACTIONS)):
            s2, delta = move(layout, s, a)
            if s2 not in index:
                if len(index) >= max_states:
                    raise ValueError(f"room {name!r} has more than {max_states} reachable states")
                index[s2] = len(order)
                order.append(s2)
                queue.append(s2)
            w = s2.boxes <= layout.targets
            r = step_penalty + (box_on if delta > 0 else box_off if delta < 0 else 0.0)
            nxt.append(index[s2])
            rew.append(r + (solved_reward if w else 0.0))
            won.append(w)
            ms.append(int(delta > 0))
        rows.append((nxt, rew, won, ms))
    # BFS pops states in index order, so row i belongs to order[i].
    solved = np.array([s.boxes <= layout.targets for s in order])
    won = np.array([r[2] for r in rows], dtype=bool)
    done = won | solved[:, None]
    return TabularMDP(
        next_state=np.array([r[0] for r in rows], dtype=np.int64),
        reward=np.array([r[1] for r in rows], dtype=np.float64),
        done=done,
        won=won,
        milestone=np.array([r[3] for r in rows], dtype=np.int64),
        mask=np.ones((len(order), len(ACTIONS)), dtype=bool),
        start=np.array([0], dtype=np.int64),
        horizon=horizon,
        state_keys=tuple(s.key() for s in order),
        action_names=ACTIONS,
        task_names=(name,),
    )


def sokoban_tasks(
    task_seeds: list[int],
    dim_room: tuple[int, int] = (6, 6),
    num_boxes: int = 1,
    max_steps: int = 15,
) -> list[TabularMDP]:
    """One MDP per task seed: the room ``SokobanEnv(...).reset(seed=seed)`` plays."""
    env = SokobanEnv(dim_room=dim_room, num_boxes=num_boxes, max_steps=max_steps)
    out = []
    for seed in task_seeds:
        env.reset(seed=int(seed))
        out.append(room_mdp(env.layout, env.state, max_steps, env.rewards, name=f"sokoban:{seed}"))
    env.close()
    return out
