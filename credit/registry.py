"""Registry of credit modules: ``credit.compute(batch, "gigpo", gamma=0.95)``.

A credit module is a function ``fn(batch: StepBatch, **hyper_parameters) -> CreditResult``,
registered by name with :func:`register`, which also declares the optional step-batch inputs the
module reads (``needs``: ``"value"``, ``"embedding"``, ``"observation"``, ``"next_state_key"``,
``"turn_reward"``, ...; a set, or a function of the options when they decide it) and what it asks
of the trainer beyond those columns (``asks``: a :class:`TrainerAsks` of names and numbers, such
as its action format and critic outputs). The trainer and the fidelity lab ask :func:`needs`
which inputs to supply; the trainer asks :func:`asks` what else to do, and maps the names to its
own implementations (``agentrl.methods``), so this library never imports the trainer.
:func:`check_option_names` is the one check of option names (against the function's signature;
an unknown option is an error listing the valid ones): :func:`compute` runs it, and so do the
trainer's checks before any work. :func:`compute` also checks the result for finiteness, so every
module gets the same guard rails.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .batch import StepBatch
from .checks import check_options, given_numbers, naming_options, warn_underflow

__all__ = [
    "CreditResult",
    "TrainerAsks",
    "UnknownOptionError",
    "asks",
    "available",
    "check_option_names",
    "compute",
    "get",
    "group_based",
    "needs",
    "options",
    "register",
]


@dataclass(frozen=True)
class CreditResult:
    """Per-step advantages (float32, aligned with the batch rows) and diagnostics.

    ``components`` holds named parts of the advantage before they are summed (for example
    ``"episode"`` and ``"step"`` for GiGPO), so :func:`agentrl.credit.compose` can stack one module's step
    term on another module's base without code.
    """

    advantages: np.ndarray
    diagnostics: dict[str, Any] = field(default_factory=dict)
    components: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class TrainerAsks:
    """What a credit module asks of the trainer beyond step-batch columns, declared by name.

    The names are keys of the trainer's hook registry (``agentrl.methods``), which holds the code
    (the action format class, the step preparation); this library only names them.

    - ``action_format``: the action format the policy's responses must be written in, with its
      prompt hint (``None``: the run's configured format, ``rollout.action``);
    - ``value_outputs``: outputs of the critic's value head, for a module that needs ``value``
      (1: one value per step; a hierarchical critic asks for more);
    - ``steps``: the trainer-side step hooks: a step-batch preparation before credit (e.g. the
      critic values the module reads) and extra inputs of the update (e.g. per-token advantages
      routed to spans); ``None``: none.
    """

    action_format: str | None = None
    value_outputs: int = 1
    steps: str | None = None

    def __post_init__(self) -> None:
        if self.value_outputs < 1:
            raise ValueError(f"value_outputs must be >= 1, got {self.value_outputs}")


class UnknownOptionError(TypeError):
    """Options a credit module does not take: ``unknown``, and the ones it does take, ``valid``."""

    def __init__(self, module: str, unknown: list[str], valid: list[str]):
        self.module, self.unknown, self.valid = module, unknown, valid
        super().__init__(
            f"unknown option(s) {', '.join(map(repr, unknown))} for credit module {module!r}; "
            f"valid: {', '.join(valid) or '(none)'}"
        )


CreditFn = Callable[..., CreditResult]
Needs = Iterable[str] | Callable[[dict[str, Any]], Iterable[str]]
_MODULES: dict[str, CreditFn] = {}
_NEEDS: dict[str, Needs] = {}
_ASKS: dict[str, TrainerAsks] = {}
Groups = bool | Callable[[dict[str, Any]], bool]
_GROUPS: dict[str, Groups] = {}


def register(
    name: str, needs: Needs = (), asks: TrainerAsks | None = None, groups: Groups = False
) -> Callable[[CreditFn], CreditFn]:
    """Decorator registering a credit module under ``name``.

    ``needs``: the optional step-batch inputs the module reads (beyond the required columns), or a
    function of the module's options (defaults filled in) that returns them. ``asks``: what it
    asks of the trainer beyond those inputs (default: nothing, :class:`TrainerAsks`).
    ``groups``: whether its baseline is the task group's other rollouts, so that groups of one
    rollout give it no signal (a bool, or a function of the options); see :func:`group_based`.
    """
    if asks is not None and not isinstance(asks, TrainerAsks):
        raise TypeError(f"asks of credit module {name!r} must be a TrainerAsks, got {asks!r}")

    def deco(fn: CreditFn) -> CreditFn:
        if name in _MODULES and _MODULES[name] is not fn:
            raise ValueError(f"credit module {name!r} is already registered")
        _MODULES[name] = fn
        _NEEDS[name] = needs if callable(needs) else frozenset(needs)
        _ASKS[name] = asks or TrainerAsks()
        _GROUPS[name] = groups
        return fn

    return deco


def needs(name: str, **opts: Any) -> frozenset[str]:
    """The optional step-batch inputs module ``name`` reads with these options.

    ``needs("gae")`` -> ``{"value"}``; ``needs("gigpo", similarity=0.9)`` -> ``{"observation"}``;
    ``compose`` answers the union of its parts.
    """
    get(name)  # an unknown name is an error listing the valid ones
    declared = _NEEDS.get(name, frozenset())
    if callable(declared):
        return frozenset(declared({**options(name), **opts}))
    return declared


def group_based(name: str, **opts: Any) -> bool:
    """Whether module ``name`` with these options needs task groups of two or more rollouts.

    ``True`` for the critic-free modules whose baseline is the group (``grpo``, ``rloo``,
    ``gigpo``, ...): with ``group_size=1`` every advantage is 0 or the raw return, never a
    comparison. ``compose`` (and ``milestone`` with a base) answers ``True`` when every part does.
    """
    get(name)  # an unknown name is an error listing the valid ones
    declared = _GROUPS.get(name, False)
    if callable(declared):
        return bool(declared({**options(name), **opts}))
    return bool(declared)


def asks(name: str) -> TrainerAsks:
    """What module ``name`` asks of the trainer (nothing: ``TrainerAsks()``)."""
    get(name)  # an unknown name is an error listing the valid ones
    return _ASKS.get(name, TrainerAsks())


def available() -> list[str]:
    """Names of all registered credit modules."""
    return sorted(_MODULES)


def get(name: str) -> CreditFn:
    try:
        return _MODULES[name]
    except KeyError:
        raise KeyError(f"unknown credit module {name!r}; valid: {', '.join(available())}") from None


def options(name: str) -> dict[str, Any]:
    """The module's hyper-parameters and their defaults."""
    sig = inspect.signature(get(name))
    return {
        p.name: p.default for p in list(sig.parameters.values())[1:] if p.kind is p.KEYWORD_ONLY
    }


def check_option_names(name: str, opts: Mapping[str, Any]) -> None:
    """Raise :class:`UnknownOptionError` when ``opts`` names an option module ``name`` lacks."""
    valid = options(name)
    unknown = sorted(set(opts) - set(valid))
    if unknown:
        raise UnknownOptionError(name, unknown, list(valid))


def compute(batch: StepBatch, method: str, **hparams: Any) -> CreditResult:
    """Run credit module ``method`` on ``batch`` with the given hyper-parameters."""
    if not isinstance(batch, StepBatch):
        raise TypeError(f"credit.compute needs a credit.StepBatch, got {type(batch).__name__}")
    fn = get(method)
    check_option_names(method, hparams)
    hparams = check_options(method, hparams)  # declared ranges (credit/checks.py), before any work
    with naming_options(hparams):  # an overflow names the numeric options given
        result = fn(batch, **hparams)
    adv = np.asarray(result.advantages)
    if adv.shape != (len(batch),):
        raise RuntimeError(
            f"credit module {method!r} returned shape {adv.shape}, expected ({len(batch)},)"
        )
    if not np.isfinite(adv).all():
        bad = np.flatnonzero(~np.isfinite(adv))
        raise FloatingPointError(
            f"credit module {method!r} produced non-finite advantages at rows {bad[:10].tolist()}"
            f"{' ...' if len(bad) > 10 else ''}: the rewards, values or numeric options are too "
            f"large for float64 (sums or squares overflow); rescale them{given_numbers(hparams)}"
        )
    with np.errstate(over="ignore"):
        adv32 = adv.astype(np.float32, copy=False)
    if not np.isfinite(adv32).all():
        raise FloatingPointError(
            f"credit module {method!r} produced advantages beyond the float32 range "
            f"(max |A| = {float(np.max(np.abs(adv))):.3g}); rescale the rewards"
            f"{given_numbers(hparams)}"
        )
    warn_underflow(method, adv)
    adv = adv32
    diagnostics = dict(result.diagnostics)
    diagnostics["zero_advantage_fraction"] = float(np.mean(adv == 0.0))
    return CreditResult(adv, diagnostics, dict(result.components))
