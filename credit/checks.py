"""Declared ranges of the credit modules' options, checked in one place before a module runs.

Every option of every built-in module has an entry in :data:`OPTION_RANGES` (a test keeps it so);
:func:`agentrl.credit.compute` calls :func:`check_options` before the module runs, so a
non-finite, out-of-range or mistyped option is a ``ValueError`` naming the option, the module
and the accepted values, instead of a silent all-zero result or an "overflow" error later.
A custom module declares its own ranges with :func:`declare`; an undeclared one is not checked.
The modules' helper functions that take an option directly (``step_returns(gamma=...)``...)
check it with :func:`check_value` and the same range objects.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "EPS_RANGE",
    "FLOAT32_TINY",
    "OPTION_RANGES",
    "UNIT",
    "Choice",
    "CreditUnderflowWarning",
    "Flag",
    "Number",
    "OptionRange",
    "Spec",
    "Text",
    "as_module_value",
    "check_options",
    "check_value",
    "declare",
    "given_numbers",
    "naming_options",
    "option_problems",
    "ranges_markdown",
    "ranges_of",
    "warn_underflow",
]


class OptionRange:
    """What values an option accepts: :meth:`accepts` tests one, :meth:`describe` says it."""

    def accepts(self, value: Any) -> bool:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


@dataclass(frozen=True)
class Number(OptionRange):
    """A finite real (or integer) in ``[lo, hi]`` (ends open where asked); ``None`` if optional."""

    lo: float = -math.inf
    hi: float = math.inf
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False
    optional: bool = False

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.optional
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False  # True/False or "0.9" are mistakes, not numbers
        try:
            x = float(value)
        except (OverflowError, ValueError):  # 10**400, Fraction(10**400, 3): beyond float64
            return False
        if not math.isfinite(x) or (self.integer and not x.is_integer()):
            return False
        above = x > self.lo if self.lo_open else x >= self.lo
        below = x < self.hi if self.hi_open else x <= self.hi
        return above and below

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a finite number"
        has_lo, has_hi = math.isfinite(self.lo), math.isfinite(self.hi)
        if has_lo and has_hi:
            where = (
                f" in {'(' if self.lo_open else '['}{_fmt(self.lo)}, "
                f"{_fmt(self.hi)}{')' if self.hi_open else ']'}"
            )
        elif has_lo:
            where = f" {'>' if self.lo_open else '>='} {_fmt(self.lo)}"
        elif has_hi:
            where = f" {'<' if self.hi_open else '<='} {_fmt(self.hi)}"
        else:
            where = ""
        return kind + where + (" or None" if self.optional else "")


@dataclass(frozen=True)
class Choice(OptionRange):
    """One of a fixed set of values."""

    choices: tuple

    def accepts(self, value: Any) -> bool:
        try:
            return bool(value in self.choices)
        except Exception:  # noqa: BLE001 - an array or a value whose == raises is not a choice
            return False

    def describe(self) -> str:
        return "one of " + ", ".join(map(repr, self.choices))


@dataclass(frozen=True)
class Flag(OptionRange):
    """``True`` or ``False`` (a string such as ``"false"`` would silently be truthy)."""

    def accepts(self, value: Any) -> bool:
        return isinstance(value, bool | np.bool_)

    def describe(self) -> str:
        return "true or false"


@dataclass(frozen=True)
class Text(OptionRange):
    """A string (``None`` too if optional)."""

    optional: bool = False

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) or (value is None and self.optional)

    def describe(self) -> str:
        return "a string" + (" or None" if self.optional else "")


@dataclass(frozen=True)
class Spec(OptionRange):
    """A module spec (a name or a mapping with ``name``) or a list of them; the spec itself is
    checked where it runs (``compose.parse_spec`` and the nested ``compute``)."""

    many: bool = False
    optional: bool = False

    def accepts(self, value: Any) -> bool:
        return True  # parse_spec raises the TypeError/ValueError that names the bad part

    def describe(self) -> str:
        one = "a module name or a mapping with 'name'"
        out = f"a list of specs ({one})" if self.many else one
        return out + (" or None" if self.optional else "")


# Shared ranges: one meaning per option name across the modules.
UNIT = Number(0.0, 1.0)  # discount factors gamma and GAE lambda
#: Added to a std before dividing: > 0 (0 makes a constant group 0/0), <= 1 (larger swamps the
#: std and shrinks every advantage towards 0, down to float32 zeros).
EPS_RANGE = Number(0.0, 1.0, lo_open=True)
NONNEG = Number(0.0)  # penalties and weights of a step term
POSITIVE = Number(0.0, lo_open=True)
MODE = Choice(("mean", "mean_std"))
STATS = Choice(("per_trajectory", "per_step_rows"))
SINGLETON = Choice(("raw", "zero"))
COUNT = Number(1.0, integer=True)

#: Per built-in module, the range of every option (names match the functions' keyword options).
OPTION_RANGES: dict[str, dict[str, OptionRange]] = {
    "grpo": dict(
        mode=MODE, stats=STATS, eps=EPS_RANGE, singleton=SINGLETON, invalid_penalty=NONNEG
    ),
    "rloo": dict(stats=STATS, singleton=SINGLETON, invalid_penalty=NONNEG),
    "gigpo": dict(
        gamma=UNIT,
        omega=NONNEG,
        mode=MODE,
        episode_stats=STATS,
        invalid_penalty=NONNEG,
        eps=EPS_RANGE,
        similarity=Number(0.0, 1.0, lo_open=True, hi_open=True, optional=True),
        similarity_key=Text(),
    ),
    "hgpo": dict(
        history_length=Number(0.0, integer=True),
        alpha=Number(),  # (k + 1)^alpha must also stay finite and > 0: checked by hgpo
        gamma=UNIT,
        mode=MODE,
        base_group=Flag(),
        invalid_penalty=NONNEG,
        eps=EPS_RANGE,
    ),
    "salt": dict(
        base=Spec(),
        node=Choice(("state", "state_action", "transition", "history")),
        min_share=COUNT,
        renormalize=Flag(),
        graph_stats=Flag(),
        eps=EPS_RANGE,
    ),
    "graphgpo": dict(
        omega=Number(0.0, 1.0, lo_open=True, hi_open=True),  # a decay per step to success
        success_reward=POSITIVE,
        step_weight=NONNEG,
        mode=MODE,
        convention=Choice(("reference", "paper")),
        episode_stats=STATS,
        invalid_penalty=NONNEG,
        eps=EPS_RANGE,
    ),
    "mars": dict(
        gamma=UNIT,
        mode=MODE,
        scope=Choice(("batch", "group")),
        reward_norm=Choice(("none", "mean")),
        invalid_penalty=NONNEG,
        eps=EPS_RANGE,
    ),
    "turn": dict(
        variant=Choice(("returns", "mt_grpo", "a2tgpo")),
        gamma=UNIT,
        weight=NONNEG,
        mode=MODE,
        signal_key=Text(optional=True),
        clip=Number(0.0, lo_open=True, optional=True),
        eps=EPS_RANGE,
    ),
    "milestone": dict(
        gamma=UNIT,
        weight=NONNEG,
        reward_scale=POSITIVE,
        mode=MODE,
        base=Spec(optional=True),
        episode_stats=STATS,
        invalid_penalty=NONNEG,
        eps=EPS_RANGE,
    ),
    "gagpo": dict(
        gamma=UNIT,
        lam=UNIT,
        mode=MODE,
        leave_one_out=Flag(),
        invalid_penalty=NONNEG,
        eps=EPS_RANGE,
    ),
    "bipace": dict(
        eps_radius=Number(0.0, 2.0),  # a cosine distance
        action_baseline=Flag(),
        min_peers=COUNT,
        gamma=UNIT,
        omega=NONNEG,
        mode=MODE,
        episode_stats=STATS,
        invalid_penalty=NONNEG,
        eps=EPS_RANGE,
    ),
    "gae": dict(gamma=UNIT, lam=UNIT, whiten=Flag(), invalid_penalty=NONNEG),
    "compose": dict(base=Spec(optional=True), terms=Spec(many=True)),
    "hiper": dict(
        gamma=UNIT,
        lam_turn=UNIT,
        lam_seg=UNIT,
        normalize=Flag(),
        keep_penalty=Number(hi=0.0),  # added to the advantage: a penalty is <= 0
        keep_penalty_mode=Choice(("normalized", "fixed")),
        keep_consistency_penalty=Number(hi=0.0),
        consistency_requires_both=Flag(),
        bootstrap_truncated=Flag(),
        invalid_penalty=NONNEG,
    ),
}

_DECLARED: dict[str, dict[str, OptionRange]] = {}


def declare(module: str, **ranges: OptionRange) -> None:
    """Declare the option ranges of a custom credit module (checked by ``compute`` from then on)."""
    for name, rng in ranges.items():
        if not isinstance(rng, OptionRange):
            raise TypeError(f"range of option {name!r} must be an OptionRange, got {rng!r}")
    _DECLARED[module] = dict(ranges)


def ranges_of(module: str) -> dict[str, OptionRange]:
    """The declared option ranges of ``module`` (empty when it declared none)."""
    return _DECLARED.get(module) or OPTION_RANGES.get(module, {})


def check_value(name: str, value: Any, rng: OptionRange, module: str | None = None) -> None:
    """Raise ``ValueError`` naming the option (and module) when ``value`` is outside ``rng``."""
    if not rng.accepts(value):
        of = f" of credit module {module!r}" if module else ""
        raise ValueError(f"option {name!r}{of} must be {rng.describe()}; got {value!r}")


def option_problems(module: str, options: Mapping[str, Any]) -> list[str]:
    """One message per given option of ``module`` outside its declared range (for config checks
    that report every problem at once)."""
    out = []
    ranges = ranges_of(module)
    for name, value in options.items():
        rng = ranges.get(name)
        if rng is not None and not rng.accepts(value):
            out.append(
                f"option {name!r} of credit module {module!r} must be {rng.describe()}; got {value!r}"
            )
    return out


def check_options(module: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Raise ``ValueError`` for the first given option of ``module`` outside its declared range;
    return the options as the module gets them (:func:`as_module_value`)."""
    problems = option_problems(module, options)
    if problems:
        raise ValueError(problems[0])
    ranges = ranges_of(module)
    return {k: as_module_value(v, ranges.get(k)) for k, v in options.items()}


def as_module_value(value: Any, rng: OptionRange | None) -> Any:
    """A real-valued option given as a Python integer or another exact real (``10**30``,
    ``Fraction(1, 3)``) as a float: numpy would try to hold ``10**30`` in an int64 and raise an
    ``OverflowError`` naming no option. Floats, numpy scalars and everything else pass unchanged,
    so valid options compute exactly as before."""
    is_exact = isinstance(value, numbers.Real) and not isinstance(value, bool | float | np.generic)
    if isinstance(rng, Number) and not rng.integer and is_exact:
        return float(value)
    return value


def given_numbers(options: Mapping[str, Any]) -> str:
    """``" (numeric options given: a=1e+300, ...)"`` for an error that the rewards *or* the
    options could have caused (an overflow), so the message names the options; ``""`` if none."""
    nums = [f"{path}={v!r}" for path, v in _numbers(options, "")]
    return f" (numeric options given: {', '.join(nums)})" if nums else ""


def _numbers(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """``(path, number)`` for every number in options, nested specs included (``base.weight``,
    ``terms[0].invalid_penalty``)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _numbers(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _numbers(v, f"{path}[{i}]")
    elif isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_):
        yield path, value


@contextlib.contextmanager
def naming_options(options: Mapping[str, Any]) -> Iterator[None]:
    """Re-raise an overflow inside a module (an ``ArithmeticError``, or a ``ValueError`` such as
    the step batch's "discounted sums overflow float64") with :func:`given_numbers` appended: a
    huge penalty overflows the same sums huge rewards do, and the message should say which."""
    try:
        yield
    except (ArithmeticError, ValueError) as exc:
        note = given_numbers(options)
        if not note or not (isinstance(exc, ArithmeticError) or "overflow" in str(exc)):
            raise
        raise type(exc)(f"{exc}{note}") from exc


class CreditUnderflowWarning(RuntimeWarning):
    """A credit module's advantages are too small for float32: they arrive as 0 (or nearly)."""


#: Below this, a float32 advantage is subnormal (imprecise) or 0.
FLOAT32_TINY = float(np.finfo(np.float32).tiny)


def warn_underflow(module: str, adv64: np.ndarray) -> None:
    """Warn, naming the module, when advantages that matter underflow float32 (the learner's
    dtype): rows whose |A| is below float32's smallest normal number yet within a factor 1e6 of
    the batch's largest |A| (smaller rows are rounding residue next to the others anyway). Tiny
    rewards (1e-200) give such advantages: exact in float64, 0 in float32; rescale the rewards."""
    mag = np.abs(np.asarray(adv64, dtype=np.float64))
    top = float(mag.max()) if mag.size else 0.0
    lost = (mag > 0) & (mag < FLOAT32_TINY) & (mag >= 1e-6 * top)
    if lost.any():
        warnings.warn(
            f"credit module {module!r}: {int(lost.sum())} of {mag.size} advantages (largest "
            f"|A| = {top:.3g}) are below float32's smallest normal number ({FLOAT32_TINY:.3g}) "
            "and reach the learner as 0 or nearly: the rewards (or the options in reward "
            "units) are too small; rescale them",
            CreditUnderflowWarning,
            stacklevel=3,
        )


def ranges_markdown() -> str:
    """The option ranges of the built-in modules as a markdown table (``docs/credit.md`` holds it)."""
    lines = ["| module | option: accepted values |", "|---|---|"]
    for module, ranges in sorted(OPTION_RANGES.items()):
        cells = "; ".join(f"`{name}`: {rng.describe()}" for name, rng in ranges.items())
        lines.append(f"| `{module}` | {cells} |")
    return "\n".join(lines)
