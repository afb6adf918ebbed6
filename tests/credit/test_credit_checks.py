"""Option ranges (credit/checks.py): every option of every module checked up front, by name."""

from __future__ import annotations

import importlib
import inspect
import math
from pathlib import Path

import numpy as np
import pytest
from agentrl.credit import StepBatch, available, checks, compute, options, register, registry
from agentrl.credit.checks import (
    OPTION_RANGES,
    Choice,
    Flag,
    Number,
    Spec,
    Text,
    check_options,
    declare,
    option_problems,
    ranges_markdown,
)
from agentrl.credit.registry import CreditResult

DOCS = Path(__file__).resolve().parents[2] / "docs" / "credit.md"


@pytest.fixture(scope="module")
def batch() -> StepBatch:
    # No embedding, value or milestone column: an option error must come before the module
    # notices a missing column, i.e. before any work.
    return StepBatch.from_trajectories(
        [
            dict(group=0, rewards=[0.0, 1.0], states=["a", "b"]),
            dict(group=0, rewards=[0.0, 0.0], states=["a", "c"]),
        ]
    )


def _defaults(module: str) -> dict:
    """Keyword options and defaults of a built-in module, registered or not (yet)."""
    if module in available():
        return options(module)
    fn = getattr(importlib.import_module(f"agentrl.credit.{module}"), module)
    params = list(inspect.signature(fn).parameters.values())[1:]
    return {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY}


def test_every_option_of_every_builtin_module_has_a_range_and_its_default_fits():
    assert set(available()) <= set(OPTION_RANGES)
    for module in OPTION_RANGES:
        assert set(OPTION_RANGES[module]) == set(_defaults(module)), module
        check_options(module, _defaults(module))  # the defaults are in range


def _bad_values(rng) -> list:
    """Values outside ``rng``: non-finite, past each end, wrong type."""
    if isinstance(rng, Number):
        bad: list = [math.nan, math.inf, -math.inf, "0.5", True]
        if math.isfinite(rng.lo):
            bad += [rng.lo - 1.0, rng.lo - 1e-9] + ([rng.lo] if rng.lo_open else [])
        if math.isfinite(rng.hi):
            bad += [rng.hi + 1.0, rng.hi + 1e-9] + ([rng.hi] if rng.hi_open else [])
        if rng.integer:
            bad += [1.5, rng.lo + 0.5]
        if not rng.optional:
            bad.append(None)
        return bad
    if isinstance(rng, Choice):
        return ["no-such-choice", None, 1, ["mean"]]
    if isinstance(rng, Flag):
        return ["false", "true", 0, 1, None]
    if isinstance(rng, Text):
        return [1, b"observation"] + ([] if rng.optional else [None])
    assert isinstance(rng, Spec)
    return []  # checked by compose.parse_spec (see test_compose_weights_must_be_finite)


CASES = [
    (module, name, value)
    for module, ranges in sorted(OPTION_RANGES.items())
    if module in available()
    for name, rng in ranges.items()
    for value in _bad_values(rng)
]


def test_the_bad_value_table_covers_the_options_named_in_the_issue():
    named = {(m, n) for m, n, _ in CASES}
    for need in [
        ("hgpo", "alpha"),
        ("hgpo", "eps"),
        ("gigpo", "omega"),
        ("graphgpo", "success_reward"),
        ("graphgpo", "step_weight"),
        ("milestone", "invalid_penalty"),
        ("gae", "gamma"),
    ]:
        assert need in named
    assert len(CASES) > 300


@pytest.mark.parametrize("module, name, value", CASES)
def test_out_of_range_options_are_errors_naming_the_option(batch, module, name, value):
    with pytest.raises(ValueError) as err:
        compute(batch, module, **{name: value})
    msg = str(err.value)
    assert f"option {name!r} of credit module {module!r} must be" in msg
    assert repr(value) in msg


@pytest.mark.parametrize("weight", [math.nan, math.inf, "1"])
def test_compose_weights_must_be_finite(batch, weight):
    with pytest.raises(ValueError, match=r"option 'terms\[0\]\.weight' must be a finite number"):
        compute(batch, "compose", terms=[{"name": "gigpo", "weight": weight}])
    with pytest.raises(ValueError, match=r"'base\.weight'"):
        compute(batch, "compose", base={"name": "grpo", "weight": weight})


def test_nested_specs_are_checked_too(batch):
    with pytest.raises(ValueError, match="option 'eps' of credit module 'grpo'"):
        compute(batch, "salt", base={"name": "grpo", "eps": -1e-6})
    with pytest.raises(ValueError, match="option 'gamma' of credit module 'gigpo'"):
        compute(batch, "compose", terms=[{"name": "gigpo", "gamma": 2.0}])


def test_ranges_accept_edges_and_numpy_scalars(batch):
    compute(batch, "gigpo", gamma=np.float32(1.0), omega=0, eps=1.0, invalid_penalty=np.int64(0))
    compute(batch, "hgpo", history_length=2.0, alpha=-3, base_group=np.bool_(True))
    compute(batch, "turn", variant="a2tgpo", clip=None, signal_key=None)


def test_custom_modules_declare_their_ranges(batch, monkeypatch):
    # registry and declarations are process-wide: work on copies that pytest restores
    monkeypatch.setattr(registry, "_MODULES", dict(registry._MODULES))
    monkeypatch.setattr(checks, "_DECLARED", dict(checks._DECLARED))

    @register("test_checks_custom")
    def custom(b: StepBatch, *, scale: float = 1.0) -> CreditResult:
        return CreditResult(np.full(len(b), scale))

    assert compute(batch, "test_checks_custom", scale=-2.0).advantages[0] == -2.0  # undeclared
    declare("test_checks_custom", scale=Number(0.0, lo_open=True))
    with pytest.raises(ValueError, match="option 'scale' of credit module 'test_checks_custom'"):
        compute(batch, "test_checks_custom", scale=-2.0)
    with pytest.raises(TypeError, match="OptionRange"):
        declare("test_checks_custom", scale=(0, 1))


def test_docs_list_the_ranges():
    assert ranges_markdown() in DOCS.read_text(), (
        "docs/credit.md: paste credit.checks.ranges_markdown() into the 'Option ranges' section"
    )


# -- HGPO at extreme values ----------------------------------------------------------------------


def _hgpo_batch(scale: float) -> StepBatch:
    return StepBatch.from_trajectories(
        [
            dict(group=0, rewards=[0.0, scale, 0.0], states=["a", "b", "c"]),
            dict(group=0, rewards=[0.0, 0.0, 0.0], states=["a", "b", "d"]),
            dict(group=0, rewards=[scale, 0.0, 0.0], states=["a", "e", "c"]),
        ]
    )


@pytest.mark.parametrize("scale", [1e160, 1e200, 1e300])
def test_hgpo_huge_rewards_keep_their_advantages(scale):
    # mean_std advantages are scale-free: the same at 1 and at 1e160.. (invalid_penalty off)
    ref = compute(_hgpo_batch(1.0), "hgpo", invalid_penalty=0.0).advantages
    got = compute(_hgpo_batch(scale), "hgpo", invalid_penalty=0.0).advantages
    assert np.abs(ref).max() > 0.5
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("alpha", [math.nan, math.inf, -math.inf, 1e6, -1e6])
def test_hgpo_alpha_that_breaks_the_level_weights_is_an_error(alpha):
    with pytest.raises(ValueError, match="option 'alpha'"):
        compute(_hgpo_batch(1.0), "hgpo", alpha=alpha)


def test_hgpo_history_length_is_bounded_by_the_longest_trajectory():
    b = _hgpo_batch(1.0)  # 3 steps: at most 3 history levels hold a step
    deep = compute(b, "hgpo", history_length=100_000)
    assert sorted(k for k in deep.components if k[1:].isdigit()) == ["k1", "k2", "k3"]
    same = compute(b, "hgpo", history_length=2)
    np.testing.assert_array_equal(deep.advantages, same.advantages)


def test_option_problems_lists_every_bad_option():
    got = option_problems("gigpo", {"gamma": 2.0, "eps": 0.0, "mode": "mean", "omega": math.nan})
    assert [p.split()[1] for p in got] == ["'gamma'", "'eps'", "'omega'"]
    assert option_problems("gigpo", options("gigpo")) == []
