"""Properties every credit module must keep, checked on generated batches (hypothesis)."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest
from agentrl.credit import StepBatch, available, compute, options
from agentrl.credit.checks import CreditUnderflowWarning
from agentrl.credit.ops import segment_std
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EPS = 1e-6

# Options chosen so each module's full path runs (embeddings, milestones, values, extras all present).
MODULES: dict[str, list[dict]] = {
    "grpo": [{}, {"mode": "mean", "stats": "per_step_rows"}],
    "rloo": [{}, {"stats": "per_step_rows"}],
    "gigpo": [{}, {"mode": "mean"}],
    "hgpo": [{}, {"mode": "mean", "base_group": True, "history_length": 3}],
    "salt": [{}, {"node": "history", "renormalize": True}, {"node": "transition", "base": "rloo"}],
    "graphgpo": [{}, {"mode": "mean", "convention": "paper"}],
    "turn": [{}, {"variant": "mt_grpo"}, {"variant": "a2tgpo", "clip": 1.0}],
    "milestone": [{}, {"mode": "mean_std"}],
    "gagpo": [{}, {"leave_one_out": True}],
    "bipace": [{}, {"action_baseline": False, "mode": "mean"}],
    "gae": [{}, {"whiten": True}],
    "mars": [{}, {"mode": "mean", "scope": "group", "reward_norm": "mean", "invalid_penalty": 0.1}],
    "hiper": [{}, {"normalize": False, "keep_penalty_mode": "fixed", "bootstrap_truncated": False}],
    "compose": [
        {
            "base": {"name": "grpo", "mode": "mean"},
            "terms": [{"name": "gigpo"}, {"name": "milestone", "weight": 0.5}],
        }
    ],
}


@st.composite
def batches(draw, rewards="small"):
    """1-3 task groups of 1-4 rollouts of 1, 2, 3, 5 or 30 steps over a few shared states."""
    rows: dict[str, list] = {
        k: []
        for k in (
            "group",
            "traj",
            "t",
            "reward",
            "state",
            "action",
            "valid",
            "ms",
            "succ",
            "value",
            "turn",
            "switch",
            "vh",
            "vt",
        )
    }
    constant = draw(st.booleans())  # all rewards of the batch equal: every group all-equal
    if rewards == "int":
        rew = st.integers(-3, 3).map(float)
    elif rewards == "huge":
        rew = st.floats(-1e30, 1e30, allow_nan=False, allow_infinity=False)
    else:
        rew = st.floats(-10, 10, allow_nan=False, allow_infinity=False)
    c = draw(rew)
    traj = 0
    for g in range(draw(st.integers(1, 3))):
        for _ in range(draw(st.integers(1, 4))):
            T = draw(st.sampled_from([1, 2, 3, 5, 30]))
            win = draw(st.booleans())
            for t in range(T):
                rows["group"].append(g)
                rows["traj"].append(traj)
                rows["t"].append(t)
                rows["reward"].append(c if constant else draw(rew))
                rows["state"].append(draw(st.integers(0, 3)))
                rows["action"].append(draw(st.integers(0, 2)))
                rows["valid"].append(draw(st.booleans()))
                rows["ms"].append(draw(st.integers(0, 2)))
                rows["succ"].append(win)
                rows["value"].append(draw(st.floats(-5, 5)))
                rows["turn"].append(draw(st.integers(-1, 1)))
                rows["switch"].append(draw(st.booleans()))  # HiPER's inputs
                rows["vh"].append(draw(st.floats(-5, 5)))
                rows["vt"].append(draw(st.floats(-5, 5)))
            traj += 1
    n = len(rows["t"])
    state = np.array(rows["state"])
    emb = (
        np.eye(4, dtype=np.float32)[state] + 0.001 * np.arange(n, dtype=np.float32)[:, None] % 0.01
    )
    done = np.zeros(n, dtype=bool)
    tr = np.array(rows["traj"])
    done[np.r_[np.flatnonzero(np.diff(tr)), n - 1]] = True
    return StepBatch(
        group=rows["group"],
        traj=tr,
        t=rows["t"],
        reward=rows["reward"],
        done=done,
        state_key=[f"s{s}" for s in rows["state"]],
        action_key=[f"a{a}" for a in rows["action"]],
        valid=rows["valid"],
        milestone=rows["ms"],
        value=rows["value"],
        embedding=emb,
        success=rows["succ"],
        extras={
            "turn_reward": np.array(rows["turn"], dtype=np.float64),
            "observation": np.array([f"room {s}" for s in state], dtype=object),
            "switch": np.array(rows["switch"], dtype=bool),
            "subgoal": np.array([f"go to {s}" for s in state], dtype=object),
            "value_high": np.array(rows["vh"], dtype=np.float64),
            "value_term": np.array(rows["vt"], dtype=np.float64),
        },
    )


SETTINGS = dict(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@settings(**SETTINGS)
@given(b=batches(rewards="huge"))
def test_finite_output_for_any_finite_input(b):
    for name, variants in MODULES.items():
        for opts in variants:
            a = compute(b, name, **opts).advantages
            assert a.shape == (len(b),) and a.dtype == np.float32
            assert np.isfinite(a).all(), (name, opts)


@settings(**SETTINGS)
@given(b=batches(rewards="small"))
def test_finite_output_small_rewards_and_similarity(b):
    for name, variants in MODULES.items():
        for opts in variants:
            assert np.isfinite(compute(b, name, **opts).advantages).all(), (name, opts)
    assert np.isfinite(compute(b, "gigpo", similarity=0.9).advantages).all()


@settings(**SETTINGS)
@given(b=batches(rewards="int"), data=st.data())
def test_results_do_not_depend_on_row_order(b, data):
    perm = np.array(data.draw(st.permutations(range(len(b)))))
    p = b.take(perm)
    for name, variants in MODULES.items():
        for opts in variants:
            a = compute(b, name, **opts).advantages
            a_p = compute(p, name, **opts).advantages
            np.testing.assert_allclose(a_p, a[perm], rtol=1e-5, atol=1e-5, err_msg=f"{name} {opts}")
    np.testing.assert_allclose(
        compute(p, "gigpo", similarity=0.9).advantages,
        compute(b, "gigpo", similarity=0.9).advantages[perm],
        rtol=1e-5,
        atol=1e-5,
    )


# Mean-normalised modules: adding a constant to every rollout's outcome (its last reward) in a task
# group shifts every return of the group (gamma = 1) by that constant and changes no advantage.
SHIFT_INVARIANT: dict[str, list[dict]] = {
    "grpo": [{"mode": "mean"}, {"mode": "mean", "stats": "per_step_rows"}],
    "rloo": [{}, {"stats": "per_step_rows"}],
    "gigpo": [{"mode": "mean", "gamma": 1.0}],
    "hgpo": [{"mode": "mean", "gamma": 1.0}, {"mode": "mean", "gamma": 1.0, "base_group": True}],
    "salt": [{"base": {"name": "grpo", "mode": "mean"}}],
    "graphgpo": [{"mode": "mean"}],
    "turn": [{"mode": "mean", "gamma": 1.0}, {"mode": "mean", "variant": "mt_grpo"}],
    "milestone": [{"mode": "mean"}],
    "gagpo": [{"mode": "mean", "gamma": 1.0}],
    "bipace": [{"mode": "mean", "gamma": 1.0}],
}


@settings(**SETTINGS)
@given(b=batches(rewards="int"), data=st.data())
def test_adding_a_constant_to_a_groups_outcomes_changes_nothing(b, data):
    shift = np.array(
        data.draw(st.lists(st.integers(-5, 5), min_size=b.num_groups, max_size=b.num_groups)),
        dtype=np.float64,
    )
    reward = b.reward + np.where(b.done, shift[b.group_index], 0.0)
    s = StepBatch(
        group=b.group,
        traj=b.traj,
        t=b.t,
        reward=reward,
        done=b.done,
        state_key=b.state_key,
        action_key=b.action_key,
        valid=b.valid,
        milestone=b.milestone,
        value=b.value,
        embedding=b.embedding,
        success=b.success,
        extras=b.extras,
    )
    # A task group of a single rollout has no baseline: by the reference convention it keeps its
    # raw return (singleton="raw"), which a shift does move; the property is about real groups.
    multi = np.bincount(b.traj_group, minlength=b.num_groups)[b.group_index] >= 2
    for name, variants in SHIFT_INVARIANT.items():
        for opts in variants:
            np.testing.assert_allclose(
                compute(s, name, **opts).advantages[multi],
                compute(b, name, **opts).advantages[multi],
                rtol=1e-5,
                atol=1e-5,
                err_msg=f"{name} {opts}",
            )


@settings(**SETTINGS)
@given(b=batches(rewards="small"))
def test_gigpo_without_repeated_states_is_its_episode_term(b):
    # give every step its own state: no anchor group has two members
    u = StepBatch(
        group=b.group,
        traj=b.traj,
        t=b.t,
        reward=b.reward,
        done=b.done,
        state_key=np.arange(len(b)),
        action_key=b.action_key,
        valid=b.valid,
    )
    for mode in ("mean", "mean_std"):
        r = compute(u, "gigpo", mode=mode)
        assert (r.components["step"] == 0).all()
        ep = compute(u, "grpo", mode=mode, stats="per_step_rows", invalid_penalty=0.1).advantages
        np.testing.assert_array_equal(r.advantages, ep)
        assert r.diagnostics["step_singleton_fraction"] == 1.0


@settings(**SETTINGS)
@given(b=batches(rewards="int"))
def test_hgpo_at_k1_groups_exactly_as_gigpo(b):
    assert np.array_equal(b.history_levels(1)[0][0], b.anchor_index)
    for mode in ("mean", "mean_std"):
        h = compute(b, "hgpo", history_length=0, mode=mode, gamma=0.5).components["k1"]
        g = compute(b, "gigpo", mode="mean", gamma=0.5).components["step"]
        # same groups: a k=1 item is non-zero exactly where GiGPO's mean-centred step term is
        np.testing.assert_array_equal(h != 0, g != 0)
    h = compute(b, "hgpo", history_length=0, mode="mean", gamma=0.5).advantages
    np.testing.assert_allclose(h, g * 2 / (2 + EPS), rtol=1e-5, atol=1e-6)


# -- extreme magnitudes ----------------------------------------------------------------------------
# Options measured in reward units: scaling the rewards by s scales these with them.
_REWARD_UNITS = (
    "invalid_penalty",
    "success_reward",
    "reward_scale",
    "keep_penalty",
    "keep_consistency_penalty",
)


def _scaled_spec(spec, s: float):
    """A module spec (name or mapping) with its reward-unit options (defaults too) times ``s``."""
    spec = {"name": spec} if isinstance(spec, str) else dict(spec)
    name = spec["name"]
    return {
        "name": name,
        **_scaled_options(name, {k: v for k, v in spec.items() if k != "name"}, s),
    }


def _scaled_options(name: str, opts: dict, s: float) -> dict:
    out = dict(opts)
    defaults = options(name)
    for key in _REWARD_UNITS:
        if key in defaults:
            out[key] = s * out.get(key, defaults[key])
    for key in ("base",):
        if key in defaults and out.get(key, defaults[key]) is not None:
            out[key] = _scaled_spec(out.get(key, defaults[key]), s)
    if "terms" in out:
        out["terms"] = [_scaled_spec(t, s) for t in out["terms"]]
    return out


def _scaled_batch(b: StepBatch, s: float) -> StepBatch:
    """The same batch with every reward-unit column times ``s`` (a power of 2: exact)."""
    extras = dict(b.extras)
    extras["turn_reward"] = extras["turn_reward"] * s
    extras["value_high"] = extras["value_high"] * s
    extras["value_term"] = extras["value_term"] * s
    return replace(b, reward=b.reward * s, value=b.value * s, extras=extras)


def test_every_registered_module_is_covered():
    assert set(MODULES) == set(available())


@settings(**SETTINGS)
@given(b=batches(rewards="small"), power=st.integers(0, 990))
def test_huge_rewards_keep_the_signal_or_give_a_clear_error(b, power):
    """Rewards up to ~1e300: finite advantages, not all zero where the batch has signal at a
    moderate scale, or an error that says to rescale; never a silent all-zero result."""
    s = 2.0**power  # exact: every sum, difference and comparison scales without rounding
    big = _scaled_batch(b, s)
    assert np.abs(big.reward).max() <= 1e300
    for name, variants in MODULES.items():
        for opts in variants:
            small = compute(b, name, **opts).advantages
            try:
                a = compute(big, name, **_scaled_options(name, opts, s)).advantages
            except (FloatingPointError, ValueError) as exc:
                assert "rescale" in str(exc), (name, opts, exc)
                continue
            assert np.isfinite(a).all(), (name, opts)
            if np.abs(small).max() > 1e-3:  # real signal, not a rounding residue of a mean
                assert (a != 0).any(), f"{name} {opts}: all zero at scale 2^{power}"


def _run(batch, name, **opts):
    """Advantages and the underflow warnings raised while computing them."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        adv = compute(batch, name, **opts).advantages
    return adv, [w for w in caught if issubclass(w.category, CreditUnderflowWarning)]


def _parts(name: str, opts: dict) -> set[str]:
    """The module and the modules its specs run (``base``, ``terms``; defaults included): a
    composite module's parts are computed, and warn, on their own."""
    out, defaults = {name}, options(name)
    specs = [opts.get("base", defaults.get("base"))] + list(opts.get("terms", ()))
    if name == "salt" and specs[0] is None:
        specs[0] = "grpo"  # salt's default base
    for spec in specs:
        if spec is not None:
            sub = spec if isinstance(spec, str) else spec["name"]
            out |= _parts(sub, {} if isinstance(spec, str) else spec)
    return out


# -- tiny rewards -------------------------------------------------------------------------------
@settings(**SETTINGS)
@given(b=batches(rewards="small"), power=st.integers(0, 1000))
def test_tiny_rewards_keep_the_signal_or_warn_by_name(b, power):
    """Rewards scaled down to ~1e-300: finite advantages, and where the unscaled batch has signal
    either some of it survives in float32 or a warning names the module."""
    s = 2.0**-power  # exact in float64
    tiny = _scaled_batch(b, s)
    for name, variants in MODULES.items():
        for opts in variants:
            small, quiet = _run(b, name, **opts)
            signal = np.abs(small).max() > 1e-3  # not a rounding residue of a mean
            if name != "compose":  # (a part of compose can lose its signal next to the others)
                assert not (signal and quiet), f"{name} {opts}: underflow warning at scale 1"
            a, warned = _run(tiny, name, **_scaled_options(name, opts, s))
            assert np.isfinite(a).all(), (name, opts)
            if signal and not (a != 0).any():
                assert warned, f"{name} {opts}: all zero at scale 2^-{power} without a warning"
                named = {
                    n
                    for n in _parts(name, opts)
                    for w in warned
                    if f"module {n!r}" in str(w.message)
                }
                assert named and all("rescale" in str(w.message) for w in warned), (name, opts)


@given(
    values=st.lists(st.floats(-10, 10), min_size=2, max_size=12),
    power=st.integers(0, 1000),
)
def test_std_is_exact_for_tiny_and_huge_deviations(values, power):
    """The std of deviations of 1e-300 (whose squares vanish in float64) or 1e300 (whose squares
    overflow) is the std of the unscaled values, scaled."""
    x = np.asarray(values)
    codes = np.zeros(len(x), dtype=np.int64)
    ref = segment_std(x, codes, 1)[0]
    for s in (2.0**-power, 2.0 ** min(power, 990)):
        got = segment_std(x * s, codes, 1)[0]
        assert got == pytest.approx(ref * s, rel=1e-9, abs=0.0), s


def test_normal_segments_are_computed_as_before():
    """Scaling applies to extreme segments only: a normal segment next to a tiny one gets the
    plain formula's result bit for bit."""
    x = np.array([0.1, 0.7, 0.3, 1e-200, 3e-200, 2e-200])
    codes = np.array([0, 0, 0, 1, 1, 1])
    std = segment_std(x, codes, 2)
    assert std[0] == segment_std(x[:3], codes[:3], 1)[0]  # as without the tiny segment
    assert std[1] == pytest.approx(1e-200, rel=1e-12)
