"""Which advantage estimators the lab measures, and the honest inputs each one gets.

Every module registered in :mod:`credit` is measured with its default options (plus any variants
named on the command line as ``name:opt=value,opt=value``). Optional step-batch columns are
supplied from the exact model, and the report says so (``value`` and ``embedding`` only to the
modules that ask for them, see :func:`run_module_spec`):

- ``value``: the true V^pi(s_t) with the module's own ``gamma`` (1.0 if it has none) and the
  step's steps-left: a perfect critic. A critic-based module is therefore an upper reference,
  not a like-for-like rival of the critic-free ones.
- ``embedding``: a fixed random Gaussian vector per state (dimension 64, unit norm): distinct
  states are nearly orthogonal, so cosine clustering recovers exact state identity.
- ``extras["next_state_key"]``: the state each step led to (GraphGPO links a failed rollout's
  last step to it).
- ``milestone``: the environment's milestone events (Sokoban: a box onto a target; the
  pick-and-place task: picking the object up, and the winning put).

Reference estimators (names starting ``ref:``) are not credit modules:
``ref:mc-minus-true-V`` is G_t - V^pi(s_t) (the single-sample return with a perfect baseline: the
noise floor of any Monte Carlo estimator), ``ref:true-advantage`` is A^pi itself (used only by
the learning runs, as the upper bound).
"""

from __future__ import annotations

import ast
import functools
import inspect
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentrl import credit
from agentrl.credit import StepBatchError

from .mdp import PolicyValues, TabularMDP, evaluate_policy
from .sampler import Rollouts, to_step_batch

__all__ = [
    "Inputs",
    "ModuleSpec",
    "default_specs",
    "module_gamma",
    "parse_module_spec",
    "run_module_spec",
    "state_embedding",
]

EMBED_DIM = 64
REFERENCES = ("ref:mc-minus-true-V", "ref:true-advantage")


@dataclass(frozen=True)
class ModuleSpec:
    """A row of the report: a registered credit module (or reference) and its options."""

    label: str
    name: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def is_reference(self) -> bool:
        return self.name.startswith("ref:")


#: Registered modules left out of the default rows, with the reason printed in the report.
LEFT_OUT = {
    "compose": "a combinator: with its defaults it is its base (grpo); measure a composition by "
    'naming it, e.g. --extra \'compose:{"base": "rloo", "terms": ["gigpo"]}\'',
    "hiper": "its three streams need a policy that writes switch decisions and subgoals, and a "
    "three-head critic: measured in its own section (HiPER: hierarchical advantages against the "
    "exact option advantages) on an option policy over the pick-and-place tasks",
    "mars": "a multi-agent module: it needs the acting agent and the game of every step, which "
    "the lab's single-agent MDPs do not have; measured on the games instead (docs/envs/"
    "multi-agent.md: Kuhn poker's exact exploitability)",
}


def parse_module_spec(text: str) -> ModuleSpec:
    """``"gigpo"``, ``"gigpo:mode=mean,gamma=0.9"`` (values parsed as Python literals), or
    ``"compose:{...}"`` (options as one Python/JSON dict literal, for nested options)."""
    text = text.strip()
    prefix = "ref:" if text.startswith("ref:") else ""
    name, _, rest = text[len(prefix) :].partition(":")
    name = prefix + name
    opts: dict[str, Any] = {}
    if rest.strip().startswith("{"):
        try:
            opts = dict(ast.literal_eval(rest.strip().replace("null", "None")))
        except (ValueError, SyntaxError, TypeError) as exc:
            raise ValueError(f"bad option dict in {text!r}: {exc}") from exc
    elif rest:
        for item in rest.split(","):
            key, eq, val = item.partition("=")
            if not eq:
                raise ValueError(f"bad module option {item!r} in {text!r}; expected key=value")
            try:
                opts[key.strip()] = ast.literal_eval(val.strip())
            except (ValueError, SyntaxError):
                opts[key.strip()] = val.strip()
    if not name.startswith("ref:") and name not in credit.available():
        raise ValueError(
            f"unknown credit module {name!r}; registered: {', '.join(credit.available())}"
        )
    if name.startswith("ref:") and name not in REFERENCES:
        raise ValueError(f"unknown reference {name!r}; valid: {', '.join(REFERENCES)}")
    shown = ",".join(f"{k}={v}" for k, v in opts.items()).replace("'", "").replace(" ", "")
    label = name if not opts else f"{name}[{shown}]"
    return ModuleSpec(label, name, opts)


def default_specs() -> list[ModuleSpec]:
    """Every registered credit module with its defaults (but those in :data:`LEFT_OUT`)."""
    return [ModuleSpec(n, n) for n in credit.available() if n not in LEFT_OUT]


@functools.cache
def _options_cached(name: str, fn_id: int) -> dict[str, Any]:
    return credit.options(name)


def _options(name: str) -> dict[str, Any]:
    """``credit.options`` (a signature inspection) cached per registered function."""
    return _options_cached(name, id(credit.get(name)))


def module_gamma(spec: ModuleSpec) -> float:
    """The discount a module works with (its ``gamma`` option), 1.0 when it has none."""
    if spec.is_reference:
        return float(spec.options.get("gamma", 1.0))
    if "gamma" in spec.options:
        return float(spec.options["gamma"])
    default = _options(spec.name).get("gamma", 1.0)
    return 1.0 if default is inspect.Parameter.empty else float(default)


@dataclass
class Inputs:
    """One sampled batch and the exact model it came from; caches V^pi per discount."""

    mdp: TabularMDP
    policy: np.ndarray
    rollouts: Rollouts
    embedding: np.ndarray
    _values: dict[float, PolicyValues] = field(default_factory=dict)

    def values(self, gamma: float) -> PolicyValues:
        if gamma not in self._values:
            self._values[gamma] = evaluate_policy(self.mdp, self.policy, gamma)
        return self._values[gamma]

    def true_advantage(self, gamma: float) -> np.ndarray:
        r = self.rollouts
        return self.values(gamma).advantage(r.state, r.action, r.steps_left)

    def true_value(self, gamma: float) -> np.ndarray:
        r = self.rollouts
        return self.values(gamma).value(r.state, r.steps_left)


def state_embedding(num_states: int, rng: np.random.Generator, dim: int = EMBED_DIM) -> np.ndarray:
    """A fixed random unit vector per state (nearly orthogonal across states)."""
    e = rng.standard_normal((num_states, dim))
    return e / np.linalg.norm(e, axis=1, keepdims=True)


#: Optional inputs the lab can supply (computed only for the modules that declare them).
SUPPLIED = ("value", "embedding", "observation", "next_state_key")


def run_module_spec(spec: ModuleSpec, inputs: Inputs) -> tuple[np.ndarray | None, str]:
    """(advantages, status). Status is ``"ok"``, ``"skipped: ..."`` (an input the lab cannot
    supply honestly, or a required option) or ``"failed: ..."`` (the module raised).

    ``value`` and ``embedding`` are built only for modules that declare them
    (:func:`agentrl.credit.needs`).
    """
    gamma = module_gamma(spec)
    if spec.name == "ref:true-advantage":
        return inputs.true_advantage(gamma), "ok"
    if spec.name == "ref:mc-minus-true-V":
        return inputs.rollouts.discounted_returns(gamma) - inputs.true_value(gamma), "ok"
    params = _options(spec.name)
    missing = [
        k for k, v in params.items() if v is inspect.Parameter.empty and k not in spec.options
    ]
    if missing:
        return None, f"skipped: needs option(s) {', '.join(missing)} with no default"
    try:
        wanted = credit.needs(spec.name, **spec.options)
    except Exception as exc:  # noqa: BLE001 - a bad spec is a finding to report
        return None, f"failed: {type(exc).__name__}: {exc}"
    unsupplied = sorted(wanted - set(SUPPLIED))
    if unsupplied:
        return None, f"skipped: needs {', '.join(unsupplied)}, which the lab cannot supply"
    batch = to_step_batch(
        inputs.rollouts,
        value=inputs.true_value(gamma) if "value" in wanted else None,
        embedding=inputs.embedding if "embedding" in wanted else None,
    )
    try:
        result = credit.compute(batch, spec.name, **spec.options)
    except StepBatchError as exc:
        return None, f"skipped: {exc}"
    except Exception as exc:  # noqa: BLE001 - a module's failure is a finding to report
        return None, f"failed: {type(exc).__name__}: {exc}"
    return np.asarray(result.advantages, dtype=np.float64), "ok"
