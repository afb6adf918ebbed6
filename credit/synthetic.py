"""Random step batches with the structure of real agent rollouts (for benchmarks and property tests).

Each task group is a small random deterministic MDP: ``n_states`` states, ``n_actions`` actions,
a fixed transition table, one goal state and a few milestone states. Its rollouts start from state
0 and act at random, so they revisit and share states the way rollouts of one task do (the anchor
groups GiGPO and kin rely on). Rewards follow Sokoban's shape: ``step_cost`` per step,
``+success_reward`` on reaching the goal (which ends the episode); episodes are cut at ``max_len``.
Optional columns: ``value`` (noise), ``embedding`` (a per-state vector plus small noise, float32),
``milestone`` (first visit of a milestone state), extras ``observation`` (text of the state) and
``next_state_key``.
"""

from __future__ import annotations

import numpy as np

from .batch import StepBatch

__all__ = ["random_batch"]


def random_batch(
    n_groups: int = 128,
    group_size: int = 8,
    max_len: int = 50,
    *,
    n_states: int = 60,
    n_actions: int = 4,
    step_cost: float = -0.1,
    success_reward: float = 10.0,
    invalid_rate: float = 0.1,
    embedding_dim: int = 0,
    seed: int = 0,
) -> StepBatch:
    """A batch of ``n_groups * group_size`` rollouts of at most ``max_len`` steps."""
    rng = np.random.default_rng(seed)
    n_traj = n_groups * group_size
    group_of = np.repeat(np.arange(n_groups), group_size)
    trans = rng.integers(0, n_states, size=(n_groups, n_states, n_actions))
    goal = rng.integers(1, n_states, size=n_groups)
    milestone_state = rng.random((n_groups, n_states)) < 0.1
    state = np.zeros(n_traj, dtype=np.int64)
    alive = np.ones(n_traj, dtype=bool)
    visited_ms = np.zeros((n_traj, n_states), dtype=bool)
    cols: dict[str, list[np.ndarray]] = {
        k: [] for k in ("traj", "t", "state", "action", "reward", "won", "valid", "ms", "next")
    }
    for t in range(max_len):
        idx = np.flatnonzero(alive)
        if not len(idx):
            break
        a = rng.integers(0, n_actions, size=len(idx))
        valid = rng.random(len(idx)) >= invalid_rate
        nxt = np.where(valid, trans[group_of[idx], state[idx], a], state[idx])
        won = nxt == goal[group_of[idx]]
        ms = milestone_state[group_of[idx], nxt] & ~visited_ms[idx, nxt]
        visited_ms[idx, nxt] |= ms
        for k, v in (
            ("traj", idx),
            ("t", np.full(len(idx), t)),
            ("state", state[idx]),
            ("action", a),
            ("reward", step_cost + success_reward * won),
            ("won", won),
            ("valid", valid),
            ("ms", ms.astype(np.int64)),
            ("next", nxt),
        ):
            cols[k].append(v)
        state[idx] = nxt
        alive[idx[won]] = False
    c = {k: np.concatenate(v) for k, v in cols.items()}
    order = np.lexsort((c["t"], c["traj"]))  # trajectory-major rows, as a rollout loop emits them
    c = {k: v[order] for k, v in c.items()}
    traj = c["traj"]
    n = len(traj)
    length = np.bincount(traj, minlength=n_traj)
    done = c["t"] == length[traj] - 1
    success = np.zeros(n_traj, dtype=bool)
    success[traj[c["won"]]] = True
    g = group_of[traj]
    state_key = np.asarray(
        [f"g{gi}s{si}" for gi, si in zip(g.tolist(), c["state"].tolist(), strict=True)],
        dtype=object,
    )
    action_key = np.asarray(
        ["up", "down", "left", "right", "push", "pull", "wait", "look"] * (1 + n_actions // 8),
        dtype=object,
    )[c["action"]]
    observation = np.asarray(
        [
            f"You are in room {s}. Exits lead {s % 4} ways; the goal is {'near' if s % 3 else 'far'}."
            for s in c["state"].tolist()
        ],
        dtype=object,
    )
    next_key = np.asarray(
        [f"g{gi}s{si}" for gi, si in zip(g.tolist(), c["next"].tolist(), strict=True)], dtype=object
    )
    embedding = None
    if embedding_dim:
        base = rng.standard_normal((n_states, embedding_dim)).astype(np.float32)
        embedding = base[c["state"]] + 0.01 * rng.standard_normal((n, embedding_dim)).astype(
            np.float32
        )
    return StepBatch(
        group=g,
        traj=traj,
        t=c["t"],
        reward=c["reward"],
        done=done,
        state_key=state_key,
        action_key=action_key,
        valid=c["valid"],
        milestone=c["ms"],
        value=rng.normal(0.0, 1.0, size=n),
        embedding=embedding,
        success=success[traj],
        extras={
            "observation": observation,
            "next_state_key": next_key,
            "turn_reward": c["valid"].astype(np.float64),
        },
    )
