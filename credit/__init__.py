"""agentrl credit assignment: step batch in, one advantage per step out (numpy only).

    from credit import StepBatch, compute
    result = compute(batch, "grpo", mode="mean_std")
    result.advantages  # float32, one per batch row

Every module is a pure function registered by name; see ``docs/credit.md`` for the table of
methods, the inputs each needs, and their defaults.
"""

from . import bipace, compose, gae, gagpo, gigpo, graphgpo, grpo, hgpo, milestone, rloo, salt, turn  # noqa: F401  (registers the modules)
from .batch import StepBatch, StepBatchError, factorize
from .registry import CreditResult, available, compute, get, options, register
from .tokens import response_token_step, step_to_tokens

__all__ = [
    "CreditResult",
    "StepBatch",
    "StepBatchError",
    "available",
    "compute",
    "factorize",
    "get",
    "options",
    "register",
    "response_token_step",
    "step_to_tokens",
]
