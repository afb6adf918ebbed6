"""agentrl credit assignment: step batch in, one advantage per step out (numpy only).

    from agentrl.credit import StepBatch, compute
    result = compute(batch, "gigpo", gamma=0.95)
    result.advantages   # float32, one per batch row
    result.diagnostics  # group sizes, singleton and zero-advantage fractions, all-fail variance
    result.components   # named parts ("episode", "step", ...) that ``compose`` can stack

Modules: grpo, rloo, gigpo, hgpo, salt, graphgpo, turn, milestone, gagpo, bipace, gae, hiper, mars,
and compose (a base plus weighted terms, from plain nested dicts). Every module is a pure function
registered by name; see ``docs/credit.md`` for the table of methods, the inputs each needs, and
their defaults.
"""

from . import (  # noqa: F401  (registers the modules)
    bipace,
    compose,
    gae,
    gagpo,
    gigpo,
    graphgpo,
    grpo,
    hgpo,
    hiper,
    mars,
    milestone,
    rloo,
    salt,
    turn,
)
from .batch import StepBatch, StepBatchError, factorize
from .explain import step_groups
from .registry import (
    CreditResult,
    TrainerAsks,
    UnknownOptionError,
    asks,
    available,
    check_option_names,
    compute,
    get,
    group_based,
    needs,
    options,
    register,
)
from .tokens import response_token_step, step_to_tokens

__all__ = [
    "CreditResult",
    "StepBatch",
    "StepBatchError",
    "TrainerAsks",
    "UnknownOptionError",
    "asks",
    "available",
    "check_option_names",
    "compute",
    "factorize",
    "get",
    "group_based",
    "needs",
    "options",
    "register",
    "response_token_step",
    "step_groups",
    "step_to_tokens",
]
