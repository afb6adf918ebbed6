"""Credit fidelity lab: credit modules' advantages against the exact advantage of a policy.

On small environments (Sokoban rooms, an ALFWorld-like pick-and-place task) every state is
enumerable, so V^pi and Q^pi of a fixed policy follow exactly by dynamic programming over
(state, steps left). The lab samples groups of rollouts as training does, runs every registered
credit module on them, and measures how well each module's advantages agree with the true
A^pi; then it trains a tabular softmax policy with each module to measure learning speed.
HiPER's three streams are measured against the exact advantages of a fixed option policy
(:mod:`.options`, :mod:`.hiper_lab`). ``scripts/credit_fidelity.py`` runs all of it and writes
``docs/credit-fidelity.md``.
"""

from .mdp import (
    PolicyValues,
    TabularMDP,
    distance_to_win,
    evaluate_policy,
    stack,
    success_probability,
)
from .metrics import agreement, bootstrap_ci, pearson, rankdata, spearman
from .modules import Inputs, ModuleSpec, default_specs, parse_module_spec, run_module_spec
from .policies import preference_logits, softmax_policy, uniform_policy
from .sampler import Rollouts, sample_groups, to_step_batch

__all__ = [
    "Inputs",
    "ModuleSpec",
    "PolicyValues",
    "Rollouts",
    "TabularMDP",
    "agreement",
    "bootstrap_ci",
    "default_specs",
    "distance_to_win",
    "evaluate_policy",
    "parse_module_spec",
    "pearson",
    "preference_logits",
    "rankdata",
    "run_module_spec",
    "sample_groups",
    "softmax_policy",
    "spearman",
    "stack",
    "success_probability",
    "to_step_batch",
    "uniform_policy",
]
