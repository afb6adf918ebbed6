"""Credit at the edges: huge or odd option values, rewards of 1e-200.

- Every option of every module, given a huge or odd value (``10**30``, ``10**400``, a huge
  ``Fraction``, ``1e308``, a value whose ``==`` raises, nested specs holding such values...),
  either computes finite advantages or raises an error whose message names the option.
- Rewards of 1e-200 (all-zero float32 advantages) warn, naming the module, in all 13 modules
  (the property over scales down to ~1e-300 is in ``test_credit_properties.py``).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import replace
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from agentrl.credit import available, compute, options, synthetic
from agentrl.credit.checks import OPTION_RANGES, CreditUnderflowWarning, Spec
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.methods.hiper import example_format_columns, example_value_columns


# -- huge and odd option values -----------------------------------------------------------------
class _RaisingEq:
    """A value whose comparison raises (a choice check must not pass that on unnamed)."""

    def __eq__(self, other):
        raise RuntimeError("no comparison")

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return "_RaisingEq()"


HUGE = [10**30, -(10**30), 10**400, -(10**400), 2**63, -(2**63) - 1, Fraction(10**400, 3),
        1e308, -1e308, 3.5e38, 1e300, np.uint64(2**64 - 1), np.int64(-(2**63)),
        np.float32(3e38), Decimal("1e400"), 5e-324]  # fmt: skip
ODD = [math.nan, math.inf, None, True, "0.5", b"x", "\x00", 1 + 2j, [0.5], {"a": 1}, {1},
       np.array([0.5]), _RaisingEq(), object(), ()]  # fmt: skip
values = st.sampled_from(HUGE + ODD) | st.integers(-(10**500), 10**500) | st.floats()


def specs(name: str, value_st):
    """Module specs whose options (or weight) hold the drawn value."""
    modules = st.sampled_from([m for m in available() if m != "compose"])
    keyed = modules.flatmap(
        lambda m: st.sampled_from([*OPTION_RANGES[m], "weight"]).map(lambda k: (m, k))
    )
    spec = st.tuples(keyed, value_st).map(lambda t: {"name": t[0][0], t[0][1]: t[1]})
    spec = spec | value_st | st.sampled_from(["no_such_module", {"nam": "grpo"}, {"name": 5}])
    return st.lists(spec, max_size=2) if name == "terms" else spec


OPTIONS = [(m, o) for m in sorted(available()) for o in OPTION_RANGES[m]]


def _names_option(msg: str, name: str, value) -> bool:
    """Whether ``msg`` names option ``name`` (or, for a nested spec, the part that is wrong)."""
    if f"'{name}'" in msg or f"{name}=" in msg or f"{name}." in msg or f"{name}[" in msg:
        return True
    if msg.startswith((name, f'"{name}')):
        return True
    nested = value if isinstance(value, list) else [value]
    keys = {k for v in nested if isinstance(v, dict) for k in v}
    return any(f"'{k}'" in msg or f"{k}=" in msg or f".{k}" in msg for k in keys)


@pytest.fixture(scope="module")
def full_batch():
    batch = synthetic.random_batch(3, 4, 8, embedding_dim=4, seed=1)
    return example_value_columns(example_format_columns(batch))  # HiPER's columns too


@pytest.mark.parametrize("module, name", OPTIONS, ids=[f"{m}.{o}" for m, o in OPTIONS])
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_huge_or_odd_option_values_compute_or_name_the_option(full_batch, module, name, data):
    rng = OPTION_RANGES[module][name]
    value = data.draw(specs(name, values) if isinstance(rng, Spec) else values, label=name)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy's overflow notes; the result is checked
            adv = compute(full_batch, module, **{name: value}).advantages
    except Exception as exc:  # noqa: BLE001 - the property is about every error
        msg = str(exc.args[0]) if exc.args else ""
        assert _names_option(msg, name, value), f"{type(exc).__name__}: {msg}"
        return
    assert np.isfinite(adv).all() and adv.dtype == np.float32


@pytest.mark.parametrize(
    "module", [m for m in sorted(available()) if "invalid_penalty" in OPTION_RANGES[m]]
)
def test_a_huge_integer_penalty_computes_as_its_float(full_batch, module):
    """``invalid_penalty=10**30`` raised ``OverflowError`` unnamed: it is the float 1e30 now."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            a = compute(full_batch, module, invalid_penalty=10**30).advantages
        except FloatingPointError as exc:  # a module whose result is not scale-free
            assert "invalid_penalty=1e+30" in str(exc) and "rescale" in str(exc)
            return
        b = compute(full_batch, module, invalid_penalty=1e30).advantages
    np.testing.assert_array_equal(a, b)


def test_the_property_covers_every_option_of_every_module():
    assert set(OPTIONS) == {(m, o) for m in available() for o in options(m)}


# -- rewards of 1e-200 -------------------------------------------------------------------------
def _run(batch, name, **opts):
    """Advantages and the underflow warnings raised while computing them."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        adv = compute(batch, name, **opts).advantages
    return adv, [w for w in caught if issubclass(w.category, CreditUnderflowWarning)]


def test_rewards_of_1e_200_warn_in_every_module():
    """The issue's case: all 14 modules, rewards 1e-200: a warning naming each module."""
    b = synthetic.random_batch(4, 4, 10, embedding_dim=4, seed=0)
    b = example_value_columns(example_format_columns(b))
    tiny = _scaled_batch_plain(b, 1e-200)
    units = ("invalid_penalty", "success_reward", "reward_scale", "keep_penalty",
             "keep_consistency_penalty")  # fmt: skip
    scaled = {  # options in reward units scale with the rewards, as in a real rescaled run
        name: {k: v * 1e-200 for k, v in options(name).items() if k in units}
        for name in available()
    }
    scaled["compose"] = {
        "base": {"name": "grpo", "invalid_penalty": 0.0},
        "terms": [{"name": "gigpo", "invalid_penalty": 1e-201}],
    }
    assert len(available()) == 14
    for name in available():
        a, warned = _run(tiny, name, **scaled.get(name, {}))
        assert np.isfinite(a).all()
        # composite modules' parts are computed (and warn) on their own
        names = {"compose": ("grpo", "gigpo"), "salt": ("salt", "grpo")}.get(name, (name,))
        mine = [
            str(w.message) for w in warned if any(f"module {n!r}" in str(w.message) for n in names)
        ]
        assert mine and all("rescale" in m for m in mine), name


def _scaled_batch_plain(b, s):
    """``b`` with rewards, values and the reward-unit extras times ``s``."""
    extras = {
        k: (v * s if k in ("turn_reward", "value_high", "value_term") else v)
        for k, v in b.extras.items()
    }
    return replace(b, reward=b.reward * s, value=None if b.value is None else b.value * s,
                   extras=extras)  # fmt: skip
