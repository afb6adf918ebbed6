"""The group sampler: identical start states per group, consistent batches, right frequencies."""

import numpy as np

from agentrl.fidelity.mdp import stack
from agentrl.fidelity.policies import uniform_policy
from agentrl.fidelity.sampler import sample_groups, to_step_batch
from agentrl.fidelity.sokoban import sokoban_tasks

from .toy import three_state


def _tasks():
    return stack(sokoban_tasks([3, 11, 42]))


def test_groups_start_from_identical_states():
    mdp = _tasks()
    r = sample_groups(mdp, uniform_policy(mdp), 8, np.random.default_rng(0))
    first = r.t == 0
    assert first.sum() == 3 * 8
    for task in range(3):
        starts = r.state[first & (r.task == task)]
        assert len(starts) == 8
        assert set(starts.tolist()) == {int(mdp.start[task])}
    # Different tasks start from different rooms, and the batch's groups are the tasks.
    assert len(set(mdp.start.tolist())) == 3
    batch = to_step_batch(r)
    np.testing.assert_array_equal(batch.group, r.task)
    assert batch.num_groups == 3 and batch.num_trajectories == 24


def test_rollout_structure_and_returns():
    mdp = _tasks()
    r = sample_groups(mdp, uniform_policy(mdp), 4, np.random.default_rng(1))
    for traj in range(12):
        rows = np.flatnonzero(r.traj == traj)
        np.testing.assert_array_equal(r.t[rows], np.arange(len(rows)))
        assert r.done[rows[-1]] and not r.done[rows[:-1]].any()
        # Each step's state is the previous step's successor.
        np.testing.assert_array_equal(
            r.state[rows[1:]], mdp.next_state[r.state[rows[:-1]], r.action[rows[:-1]]]
        )
        ends_won = mdp.won[r.state[rows[-1]], r.action[rows[-1]]]
        assert ends_won == r.traj_won[traj]
        assert ends_won or len(rows) == mdp.horizon
    np.testing.assert_allclose(np.bincount(r.traj, weights=r.reward), r.traj_return)
    batch = to_step_batch(r)
    for gamma in (1.0, 0.95):
        np.testing.assert_allclose(r.discounted_returns(gamma), batch.discounted_returns(gamma))


def test_sampling_is_reproducible_and_follows_the_policy():
    mdp = three_state(1)
    pi = np.array([[0.8, 0.2]] * 3)
    a = sample_groups(mdp, pi, 20000, np.random.default_rng(5))
    b = sample_groups(mdp, pi, 20000, np.random.default_rng(5))
    np.testing.assert_array_equal(a.action, b.action)
    freq = np.mean(a.action == 0)
    assert abs(freq - 0.8) < 4 * np.sqrt(0.8 * 0.2 / 20000)


def test_mean_return_matches_the_exact_value():
    """Monte Carlo check of the DP: 40000 uniform rollouts of the three-state MDP, 3 steps."""
    from agentrl.fidelity.mdp import evaluate_policy

    mdp = three_state(3)
    pi = uniform_policy(mdp)
    r = sample_groups(mdp, pi, 40000, np.random.default_rng(7))
    exact = evaluate_policy(mdp, pi).V[3, 0]  # 2.75 by hand (test_dp)
    se = r.traj_return.std() / np.sqrt(len(r.traj_return))
    assert abs(r.traj_return.mean() - exact) < 4 * se


def test_masked_actions_are_never_sampled():
    from agentrl.fidelity.pickplace import pickplace_tasks

    mdp = stack(pickplace_tasks([0, 1]))
    r = sample_groups(mdp, uniform_policy(mdp), 64, np.random.default_rng(0))
    assert mdp.mask[r.state, r.action].all()
