"""milestone, graphgpo, salt, gagpo, bipace, turn, gae on small groups worked out by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from agentrl.credit import StepBatch, StepBatchError, compute

EPS = 1e-6


def rebuild(b: StepBatch, **over) -> StepBatch:
    """``b`` with some columns replaced, validated again."""
    return dataclasses.replace(b, **over)


# -- milestone (BEACON) ------------------------------------------------------------------------


def milestone_batch():
    # traj 0: 5 steps, milestones at t=1 and t=3, reward 1 at the end (R=1)
    # traj 1: 3 steps, a milestone at t=2 (R=0)
    return StepBatch.from_trajectories(
        [
            dict(
                group=0, rewards=[0, 0, 0, 0, 1], states=list("abcde"), milestones=[0, 1, 0, 1, 0]
            ),
            dict(group=0, rewards=[0, 0, 0], states=list("afg"), milestones=[0, 0, 1]),
        ]
    )


def test_milestone_hand_computed():
    # shaped reward (R_ms 10, gamma 0.5): traj0 segment 0 = t0,t1 closes at t1 -> [5, 10];
    #   segment 1 = t2,t3 closes at t3 -> [5, 10]; t4 after the last milestone -> 0
    # traj1 segment 0 = t0..t2 closes at t2 -> [2.5, 5, 10]
    # segment groups: (g0, seg0) = {5, 10, 2.5, 5, 10}: mean 32.5/5 = 6.5 -> [-1.5, 3.5, -4, -1.5, 3.5]
    #                 (g0, seg1) = {5, 10}: mean 7.5 -> [-2.5, 2.5];  (g0, seg2) = {0} alone -> 0
    # episode term (rows, mean): R rows [1]*5 + [0]*3, mean 5/8 -> traj0 +0.375, traj1 -0.625
    r = compute(milestone_batch(), "milestone", gamma=0.5, invalid_penalty=0)
    step = [-1.5, 3.5, -2.5, 2.5, 0.0, -4.0, -1.5, 3.5]
    np.testing.assert_allclose(r.components["shaped_reward"], [5, 10, 5, 10, 0, 2.5, 5, 10])
    np.testing.assert_allclose(r.components["step"], step)
    np.testing.assert_allclose(
        r.advantages, np.array(step) + np.array([0.375] * 5 + [-0.625] * 3), rtol=1e-6
    )
    assert r.diagnostics["milestones_per_trajectory"] == 1.5


def test_milestone_base_and_weight():
    b = milestone_batch()
    r = compute(b, "milestone", gamma=0.5, invalid_penalty=0, weight=0.5, base={"name": "rloo"})
    rloo = compute(b, "rloo").advantages
    np.testing.assert_allclose(r.advantages, rloo + 0.5 * r.components["step"], rtol=1e-6)


def test_milestone_needs_the_column():
    b = StepBatch.from_trajectories([dict(group=0, rewards=[1], states=["a"])])
    with pytest.raises(StepBatchError, match="'milestone'.*info\\['milestones'\\]"):
        compute(b, "milestone")


# -- graphgpo ----------------------------------------------------------------------------------


def graph_batch():
    # traj 0 (won):  A -> B -> SUCCESS
    # traj 1 (lost): A -> C -> (end)
    # traj 2 (won):  A -> C -> B -> SUCCESS
    return StepBatch.from_trajectories(
        [
            dict(group=0, rewards=[0, 1], states=["A", "B"], success=True),
            dict(group=0, rewards=[0, 0], states=["A", "C"], success=False),
            dict(group=0, rewards=[0, 0, 1], states=["A", "C", "B"], success=True),
        ]
    )


def test_graphgpo_hand_computed():
    # reverse BFS from SUCCESS: d(B) = 1, d(A) = 2 (A->B), d(C) = 2 (C->B); traj1's end is
    # unreachable -> largest finite d (2) + 1 = 3.
    # raw = 10 * 0.1^d(next): traj0 [d(B)=1 -> 1, d(S)=0 -> 10]; traj1 [d(C)=2 -> 0.1, d(end)=3 -> 0.01];
    #                          traj2 [0.1, d(B)=1 -> 1, 10]
    # anchor groups (mean): A {1, 0.1, 0.1} mean 0.4 -> [0.6, -0.3, -0.3]; B {10, 10} -> 0, 0;
    #                       C {0.01, 1} mean 0.505 -> [-0.495, 0.495]
    # episode (rows, mean): R rows [1,1, 0,0, 1,1,1], mean 5/7
    r = compute(graph_batch(), "graphgpo", mode="mean", invalid_penalty=0)
    np.testing.assert_allclose(
        r.components["graph_return"], [1, 10, 0.1, 0.01, 0.1, 1, 10], rtol=1e-12
    )
    step = [0.6, 0.0, -0.3, -0.495, -0.3, 0.495, 0.0]
    np.testing.assert_allclose(r.components["step"], step, atol=1e-12)
    e = np.array([1, 1, 0, 0, 1, 1, 1]) - 5 / 7
    np.testing.assert_allclose(r.advantages, e + step, rtol=1e-6)


def test_graphgpo_paper_convention_and_no_success():
    r = compute(graph_batch(), "graphgpo", mode="mean", invalid_penalty=0, convention="paper")
    np.testing.assert_allclose(
        r.components["graph_return"], [0.1, 1, 0.01, 0.001, 0.01, 0.1, 1], rtol=1e-12
    )
    lost = StepBatch.from_trajectories(
        [dict(group=0, rewards=[0, 0], states=["A", "B"], success=False)] * 2
    )
    assert (compute(lost, "graphgpo").components["step"] == 0).all()


def test_graphgpo_next_state_key_merges_failed_ends():
    # with next_state_key, traj1's end state "B" is the node B (d = 1), not an unreachable end
    b = graph_batch()
    b = rebuild(
        b, extras={"next_state_key": np.array(["B", "S", "C", "B", "C", "B", "S"], dtype=object)}
    )
    raw = compute(b, "graphgpo", mode="mean", invalid_penalty=0).components["graph_return"]
    assert raw[3] == pytest.approx(1.0)


# -- salt --------------------------------------------------------------------------------------


def salt_batch():
    # traj 0 (R=1): (s0,a) (s1,b);  traj 1 (R=0): (s0,a) (s1,c);  traj 2 (R=0): (s0,d) (s2,e)
    return StepBatch.from_trajectories(
        [
            dict(group=0, rewards=[0, 1], states=["s0", "s1"], actions=["a", "b"], success=True),
            dict(group=0, rewards=[0, 0], states=["s0", "s1"], actions=["a", "c"]),
            dict(group=0, rewards=[0, 0], states=["s0", "s2"], actions=["d", "e"]),
        ]
    )


def test_salt_state_action_nodes():
    # base GRPO (mean): R = [1, 0, 0], mean 1/3 -> [2/3, -1/3, -1/3]
    # node (s0,a) is shared by traj0 and traj1: (2/3 - 1/3)/2 = 1/6 on both; other nodes are
    # taken by one rollout (< min_share 2) and keep their rollout's advantage
    r = compute(salt_batch(), "salt", base={"name": "grpo", "mode": "mean"})
    np.testing.assert_allclose(
        r.advantages, [1 / 6, 2 / 3, 1 / 6, -1 / 3, -1 / 3, -1 / 3], rtol=1e-6
    )
    assert r.diagnostics["shared_step_fraction"] == pytest.approx(2 / 6)
    assert r.diagnostics["mixed_outcome_node_fraction"] == 1.0  # (s0,a): a winner and a loser


def test_salt_state_nodes_and_history():
    # node = state: s0 is on all three rollouts: (2/3 - 1/3 - 1/3)/3 = 0; s1 on traj0 and traj1: 1/6
    r = compute(salt_batch(), "salt", base={"name": "grpo", "mode": "mean"}, node="state")
    np.testing.assert_allclose(r.advantages, [0, 1 / 6, 0, 1 / 6, 0, -1 / 3], atol=1e-7)
    # node = history: (s0,a) is a shared prefix of traj0/traj1; (s0,a,s1,b) and (s0,a,s1,c) differ
    r = compute(
        salt_batch(),
        "salt",
        base={"name": "grpo", "mode": "mean"},
        node="history",
        graph_stats=True,
    )
    np.testing.assert_allclose(
        r.advantages, [1 / 6, 2 / 3, 1 / 6, -1 / 3, -1 / 3, -1 / 3], rtol=1e-6
    )
    assert r.diagnostics["graph_is_dag"] is True  # a prefix tree
    assert r.diagnostics["graph_nodes"] == 5


def test_salt_revisits_count_one_rollout_once():
    # traj 0 visits node (x,a) twice: still one rollout there; with traj 1: (A0 + A1)/2
    b = StepBatch.from_trajectories(
        [
            dict(group=0, rewards=[0, 0, 3], states=["x", "x", "y"]),
            dict(group=0, rewards=[0, 1], states=["x", "z"]),
        ]
    )
    # base mean: R = [3, 1], mean 2 -> [1, -1]; node (x,a): (1 + -1)/2 = 0
    a = compute(b, "salt", base={"name": "grpo", "mode": "mean"}).advantages
    np.testing.assert_allclose(a, [0, 0, 1, 0, -1], atol=1e-7)


def test_salt_graph_networkx():
    from agentrl.credit.salt import salt_graph

    g = salt_graph(salt_batch(), "state_action")
    assert g.number_of_nodes() == 5 and g.number_of_edges() == 3
    shared = [n for n, d in g.nodes(data=True) if d["rollouts"] == 2]
    assert len(shared) == 1


# -- gagpo -------------------------------------------------------------------------------------


def test_gagpo_hand_computed():
    # traj 0: A B, rewards 0 1; traj 1: A C, rewards 0 0; traj 2: A B, rewards 0 0
    # gamma 1: G traj0 [1, 1], traj1 [0, 0], traj2 [0, 0]
    # value proxy: V(A) = mean{1, 0, 0} = 1/3; V(B) = mean{1, 0} = 1/2; V(C) = 0
    # delta: traj0 [0 + 1/2 - 1/3 = 1/6, 1 + 0 - 1/2 = 1/2]; traj1 [0 + 0 - 1/3 = -1/3, 0];
    #        traj2 [1/6, 0 - 1/2 = -1/2]
    # GAE with gamma*lam = 0.5: traj0 [1/6 + 0.25 = 5/12, 1/2]; traj1 [-1/3, 0]; traj2 [1/6 - 1/4 = -1/12, -1/2]
    # group mean over rows = (5/12 + 6/12 - 4/12 + 0 - 1/12 - 6/12)/6 = 0 -> unchanged (mode mean)
    b = StepBatch.from_trajectories(
        [
            dict(group=0, rewards=[0, 1], states=["A", "B"]),
            dict(group=0, rewards=[0, 0], states=["A", "C"]),
            dict(group=0, rewards=[0, 0], states=["A", "B"]),
        ]
    )
    r = compute(b, "gagpo", gamma=1.0, lam=0.5, mode="mean")
    np.testing.assert_allclose(r.components["value_proxy"], [1 / 3, 1 / 2, 1 / 3, 0, 1 / 3, 1 / 2])
    np.testing.assert_allclose(r.advantages, [5 / 12, 1 / 2, -1 / 3, 0, -1 / 12, -1 / 2], atol=1e-7)
    # leave-one-out: V(A) for traj0 = mean{0, 0} = 0; for traj1 = mean{1, 0} = 1/2
    v = compute(b, "gagpo", gamma=1.0, lam=0.5, mode="mean", leave_one_out=True).components[
        "value_proxy"
    ]
    np.testing.assert_allclose(v, [0, 0, 1 / 2, 0, 1 / 2, 1])


# -- bipace ------------------------------------------------------------------------------------


def test_bipace_hand_computed():
    # four one-step rollouts; embeddings [1,0], [1,0.01], [0,1], [1,0.02]: rows 0, 1, 3 are within
    # cosine distance 0.05 of leader row 0; row 2 leads its own cluster.
    # G = reward = [1, 0, 5, 3]; cluster C = {0, 1, 3}: mean 4/3
    # actions a, a, b, b: in C, action a = rows 0, 1 -> Q = 0.5 -> A^S = 0.5 - 4/3 = -5/6
    # row 3 is the only b in C (< min_peers 2): leave-one-out 3 - (1 + 0)/2 = 2.5; row 2 alone -> 0
    # episode (rows = rollouts, mean): R mean 9/4 -> [-1.25, -2.25, 2.75, 0.75]
    b = StepBatch(
        group=[0, 0, 0, 0],
        traj=[0, 1, 2, 3],
        t=[0, 0, 0, 0],
        reward=[1.0, 0.0, 5.0, 3.0],
        done=[True] * 4,
        state_key=["p", "q", "r", "s"],
        action_key=["a", "a", "b", "b"],
        valid=[True] * 4,
        embedding=np.array([[1, 0], [1, 0.01], [0, 1], [1, 0.02]], dtype=np.float32),
    )
    r = compute(b, "bipace", mode="mean")
    np.testing.assert_allclose(r.components["step"], [-5 / 6, -5 / 6, 0, 2.5], rtol=1e-6)
    np.testing.assert_allclose(
        r.advantages, np.array([-1.25, -2.25, 2.75, 0.75]) + [-5 / 6, -5 / 6, 0, 2.5], rtol=1e-6
    )
    assert r.diagnostics["cluster_group_sizes"] == {1: 1, 3: 1}
    assert (
        r.diagnostics["anchor_singleton_fraction"] == 1.0
    )  # exact states would give no step signal
    # plain BiGPO: G - mean_C
    s = compute(b, "bipace", mode="mean", action_baseline=False).components["step"]
    np.testing.assert_allclose(s, [1 - 4 / 3, -4 / 3, 0, 3 - 4 / 3], rtol=1e-6)
    # a tight radius splits the cluster: [1,0.02] is at cosine distance 2e-4 from [1,0]
    s = compute(b, "bipace", mode="mean", eps_radius=1e-5).components["step"]
    assert s[3] == 0 and s[2] == 0


def test_bipace_needs_embeddings():
    b = StepBatch.from_trajectories([dict(group=0, rewards=[1], states=["a"])])
    with pytest.raises(StepBatchError, match="'embedding'.*hidden states"):
        compute(b, "bipace")


# -- turn --------------------------------------------------------------------------------------


def turn_batch():
    # traj 0 rewards [1, 2] (turn rewards [1, 0]); traj 1 rewards [3, 0, 1] (turn rewards [0, 0, 0])
    b = StepBatch.from_trajectories(
        [
            dict(group=0, rewards=[1, 2], states=["a", "b"]),
            dict(group=0, rewards=[3, 0, 1], states=["a", "c", "d"]),
        ]
    )
    return rebuild(b, extras={"turn_reward": np.array([1.0, 0, 0, 0, 0])})


def test_turn_returns():
    # gamma 1: G traj0 [3, 2], traj1 [4, 1, 1]; cells: t0 {3, 4} -> [-0.5, 0.5]; t1 {2, 1} -> [0.5, -0.5];
    # t2 {1} alone -> 0
    a = compute(turn_batch(), "turn", gamma=1.0, mode="mean").advantages
    np.testing.assert_allclose(a, [-0.5, 0.5, 0.5, -0.5, 0])


def test_turn_mt_grpo():
    # outcome R = [3, 4] -> A^O = [-0.5, 0.5]; turn rewards: cell t0 {1, 0} -> [0.5, -0.5]; t1 {0, 0} -> 0
    # A = A^O + A^T: traj0 [0, -0.5]; traj1 [0, 0.5, 0.5]
    a = compute(turn_batch(), "turn", variant="mt_grpo", mode="mean").advantages
    np.testing.assert_allclose(a, [0, -0.5, 0, 0.5, 0.5])
    with pytest.raises(StepBatchError, match="'turn_reward'"):
        compute(
            StepBatch.from_trajectories([dict(group=0, rewards=[1], states=["a"])]),
            "turn",
            variant="mt_grpo",
        )


def test_turn_a2tgpo():
    # per-turn signal = reward: cells t0 {1, 3} -> [-1, 1]; t1 {2, 0} -> [1, -1]; t2 {1} -> 0
    # gamma 1, divided by sqrt(#terms): traj0 t0 (-1 + 1)/sqrt2 = 0, t1 1/1 = 1;
    #   traj1 t0 (1 - 1 + 0)/sqrt3 = 0, t1 (-1 + 0)/sqrt2, t2 0
    a = compute(turn_batch(), "turn", variant="a2tgpo", gamma=1.0, mode="mean").advantages
    np.testing.assert_allclose(a, [0, 1, 0, -1 / np.sqrt(2), 0], atol=1e-7)
    a = compute(turn_batch(), "turn", variant="a2tgpo", gamma=1.0, mode="mean", clip=0.5).advantages
    np.testing.assert_allclose(a, [0, 0.5, 0, -0.5 / np.sqrt(2), 0], atol=1e-7)


# -- gae ---------------------------------------------------------------------------------------


def test_gae_one_step_is_outcome_minus_value():
    b = StepBatch.from_trajectories([dict(group=0, rewards=[1.0], states=["a"], values=[0.3])])
    r = compute(b, "gae", gamma=1.0, lam=1.0)
    assert r.advantages[0] == pytest.approx(0.7)
    assert r.components["returns"][0] == pytest.approx(1.0)


def test_gae_two_steps():
    # rewards [0, 1], values [0.5, 0.8], gamma 0.9, lam 0.5
    # delta1 = 1 + 0 - 0.8 = 0.2; delta0 = 0 + 0.9 * 0.8 - 0.5 = 0.22
    # A1 = 0.2; A0 = 0.22 + 0.45 * 0.2 = 0.31; returns = A + V = [0.81, 1.0]
    b = StepBatch.from_trajectories(
        [dict(group=0, rewards=[0.0, 1.0], states=["a", "b"], values=[0.5, 0.8])]
    )
    r = compute(b, "gae", gamma=0.9, lam=0.5)
    np.testing.assert_allclose(r.advantages, [0.31, 0.2], rtol=1e-6)
    np.testing.assert_allclose(r.components["returns"], [0.81, 1.0], rtol=1e-6)
    w = compute(b, "gae", gamma=0.9, lam=0.5, whiten=True).advantages
    assert abs(float(w.mean())) < 1e-6 and float(w.std()) == pytest.approx(1.0, rel=1e-3)


def test_gae_needs_values():
    b = StepBatch.from_trajectories([dict(group=0, rewards=[1.0], states=["a"])])
    with pytest.raises(StepBatchError, match="'value'.*value head"):
        compute(b, "gae")
