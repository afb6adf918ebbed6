"""The tabular policy-gradient learner improves the exact success probability."""

import numpy as np

from agentrl.fidelity.experiment import adam_step, train_tabular
from agentrl.fidelity.modules import parse_module_spec, state_embedding
from agentrl.fidelity.tasks import draw_tasks


def test_adam_first_step_moves_each_parameter_by_lr():
    theta = np.zeros(3)
    adam_step(theta, np.array([2.0, -0.5, 0.0]), {}, lr=0.1)
    np.testing.assert_allclose(theta, [0.1, -0.1, 0.0], atol=1e-6)


def test_learning_raises_success():
    mdp = draw_tasks("sokoban", 4, np.random.default_rng(0))
    emb = state_embedding(mdp.num_states, np.random.default_rng(1))
    for name, target in (("ref:true-advantage", 0.9), ("grpo", None)):
        curve, status = train_tabular(
            mdp, parse_module_spec(name), 8, 30, 0.1, np.random.default_rng(2), emb
        )
        assert status == "ok" and len(curve) == 31
        assert curve[-1] > curve[0] + 0.2, (name, curve)
        if target:
            assert curve[-1] > target
