"""agentrl credit assignment: step batch in, one advantage per step out (numpy only).

    from agentrl.credit import StepBatch, compute
    result = compute(batch, "gigpo", gamma=0.95)
    result.advantages   # float32, one per batch row
    result.diagnostics  # group sizes, singleton and zero-advantage fractions, all-fail variance
    result.components   # named parts ("episode", "step", ...) that ``compose`` can stack

Modules: grpo, rloo, gigpo, hgpo, salt, graphgpo, turn, milestone, gagpo, bipace, gae, hiper,
and compose (a base plus weighted terms, from plain nested dicts). Every module is a pure function
registered by name; see ``docs/credit.md`` for the table of methods, the inputs each needs, and
their defaults.
"""

from . import bipace, compose, gae, gagpo, gigpo, graphgpo, grpo, hgpo, milestone, rloo, salt, turn  # noqa: F401  (registers the modules)
from . import hiper as _hiper
from .batch import StepBatch, StepBatchError, factorize
from .registry import CreditResult, available, compute, get, needs, options, register
from .tokens import response_token_step, step_to_tokens

# HiPER's HAE: the trainer supplies its inputs with credit=hiper (three-head critic, spans).
register("hiper", needs=_hiper.needs)(_hiper.hiper)

__all__ = [
    "CreditResult",
    "StepBatch",
    "StepBatchError",
    "available",
    "compute",
    "factorize",
    "get",
    "needs",
    "options",
    "register",
    "response_token_step",
    "step_to_tokens",
]
