"""Token-level shapers: reshape a step's advantage over that step's response tokens.

    from agentrl.credit import token_shapers as ts
    tokens = ts.TokenBatch(step=token_step_rows, self_certainty=..., token_logit=...)
    token_adv = ts.shape(batch, step_advantages, tokens, "ucas")

A shaper takes the step batch (for ids: group, trajectory, success), one advantage per step (from
any step-level module) and per-token signals of the response tokens, flattened in generation
order (``TokenBatch.step`` names each token's step row; a step's tokens are contiguous), and
returns one advantage per token. Signals are recorded at rollout (sampling log-probs) or
recomputed by the learner (entropy, self-certainty, the chosen token's logit, reference and
hindsight-teacher log-probs). Every shaper keeps each token's advantage on the sign of its step's
advantage unless its entry says otherwise.

- ``ucas`` (Xie et al., 2025, arXiv:2510.10649) [code: github.com/xvolcano02/UCAS]: the step's
  summed self-certainty (logsumexp(logits) - mean(logits) per token) is z-scored within the task
  group (unbiased std; a singleton keeps its value); the advantage is scaled by
  exp(-beta_pos * c) when positive and exp(beta_neg * c) otherwise; then
  ``penalty`` * (the chosen token's raw logit, min-max scaled over the batch's tokens) is
  subtracted per token, clamped at 0 for positive advantages. Defaults (their code): beta_pos
  0.25, beta_neg 0.35, penalty 0.05. As in their code, a zero or negative advantage also gets the
  logit penalty (so a zero advantage becomes slightly negative); ``penalize_nonpositive=False``
  turns that off. Difference: their response is a whole answer; here it is one agent step, and the
  z-score group is the step's task group (all its rollouts' steps).
- ``less`` (Chen et al., 2025, arXiv:2512.00908) [paper abstract + recon]: low-entropy segments
  (maximal runs of >= ``min_len`` consecutive tokens with entropy <= the batch's
  ``entropy_quantile`` quantile, or <= ``entropy_threshold`` when given) are matched by their
  token ids across the steps of a task group. A segment found only in successful rollouts' steps
  gets its advantage multiplied by 1 + ``amplify``; one found only in failed rollouts' steps by
  1 + ``suppress`` (a stronger push away); one found in both is neutralised (0). Other tokens keep
  the step advantage. Success is the trajectory's ``success`` column, else the sign of the step
  advantage. The thresholds and factors are reconstructions, exposed as options.
- ``progress`` (progress advantage, 2026) [paper abstract + recon]: log pi(a|s) - log pi_ref(a|s)
  per token is the implicit advantage of the RL-trained policy over its reference. Used as a
  shaper, it redistributes the step advantage over the step's tokens (below) with score
  sign(A) * clip(log pi - log pi_ref, -clip, clip).
- ``stepopsd`` (StepOPSD, 2026) [paper abstract + recon]: the step's tokens rescored by the same
  model under a hindsight-enriched context (``teacher_logprob``); the gap teacher - student
  log-prob redistributes the step advantage with score sign(A) * gap.

Redistribution (``progress``, ``stepopsd``): per step, weights w = softmax(score / tau) * n over
its n tokens (mean 1), and A_token = A * ((1 - budget) + budget * w). The step's summed token
advantage stays n * A (the per-step credit budget), every token keeps A's sign, and a zero step
advantage stays zero.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from .batch import StepBatch

__all__ = ["SHAPERS", "TokenBatch", "available", "keeps_zero", "needs", "options", "shape"]


@dataclass(frozen=True)
class TokenBatch:
    """Per response token (flattened, a step's tokens contiguous in generation order).

    ``step``: the step-batch row of each token. Signals (``None`` when not recorded): ``logprob``
    (sampling log-prob), ``entropy``, ``self_certainty`` (logsumexp(logits) - mean(logits)),
    ``token_logit`` (raw logit of the chosen token), ``ref_logprob``, ``teacher_logprob``
    (hindsight-context rescoring), ``token_id``.
    """

    step: np.ndarray
    logprob: np.ndarray | None = None
    entropy: np.ndarray | None = None
    self_certainty: np.ndarray | None = None
    token_logit: np.ndarray | None = None
    ref_logprob: np.ndarray | None = None
    teacher_logprob: np.ndarray | None = None
    token_id: np.ndarray | None = None

    def __post_init__(self) -> None:
        step = np.asarray(self.step)
        if step.ndim != 1 or step.dtype.kind not in "iu":
            raise ValueError(f"TokenBatch.step must be a 1-d integer array, got {step.dtype}")
        object.__setattr__(self, "step", step.astype(np.int64))
        for f in fields(self)[1:]:
            v = getattr(self, f.name)
            if v is None:
                continue
            arr = np.asarray(v, dtype=np.int64 if f.name == "token_id" else np.float64)
            if arr.shape != step.shape:
                raise ValueError(
                    f"TokenBatch.{f.name} has shape {arr.shape}, expected {step.shape} (one per token)"
                )
            if arr.dtype.kind == "f" and not np.isfinite(arr).all():
                bad = np.flatnonzero(~np.isfinite(arr))[:10].tolist()
                raise ValueError(f"TokenBatch.{f.name} has NaN or infinite values at tokens {bad}")
            object.__setattr__(self, f.name, arr)

    def require(self, name: str, shaper: str) -> np.ndarray:
        v = getattr(self, name)
        if v is None:
            raise ValueError(
                f"token shaper {shaper!r} needs the per-token signal {name!r}; "
                f"the learner records it when credit.token={shaper} is set"
            )
        return v


def _step_sums(values: np.ndarray, step: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(step, weights=values, minlength=n)


def _group_zscore(x: np.ndarray, group: np.ndarray, eps: float, std: bool) -> np.ndarray:
    """Per step, (x - mean) / (unbiased std + eps) within its group; singletons unchanged."""
    codes = np.unique(group, return_inverse=True)[1].reshape(-1)
    k = codes.max() + 1
    cnt = np.bincount(codes, minlength=k)
    mean = np.bincount(codes, weights=x, minlength=k) / cnt
    dev = x - mean[codes]
    single = cnt[codes] == 1
    if not std:
        return np.where(single, x, dev)
    var = np.bincount(codes, weights=dev**2, minlength=k) / np.maximum(cnt - 1, 1)
    return np.where(single, x, dev / (np.sqrt(var)[codes] + eps))


def ucas(
    batch: StepBatch,
    step_adv: np.ndarray,
    tokens: TokenBatch,
    *,
    beta_pos: float = 0.25,
    beta_neg: float = 0.35,
    penalty: float = 0.05,
    normalize_std: bool = True,
    penalize_nonpositive: bool = True,
    eps: float = 1e-6,
) -> np.ndarray:
    """UCAS: self-confidence modulation of the step advantage and a logit-certainty penalty."""
    step = tokens.step
    cert = _step_sums(tokens.require("self_certainty", "ucas"), step, len(batch))
    c = _group_zscore(cert, batch.group, eps, normalize_std)
    A = np.asarray(step_adv, dtype=np.float64)
    mod = np.where(A > 0, np.exp(-beta_pos * c), np.exp(beta_neg * c))
    scaled = (A * mod)[step]
    logit = tokens.require("token_logit", "ucas")
    if not len(logit):
        return scaled
    lo, hi = logit.min(), logit.max()
    nl = np.full(len(logit), 0.5) if np.isclose(hi, lo) else (logit - lo) / (hi - lo + eps)
    raw = scaled - penalty * nl
    positive = scaled > 0
    out = np.where(positive, np.maximum(raw, 0.0), raw)
    if not penalize_nonpositive:
        out = np.where(positive, out, scaled)
    return out


def _runs(mask: np.ndarray, step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per token, the id of its maximal run of consecutive ``mask`` tokens in one step (-1 off)."""
    start = mask.copy()
    start[1:] &= ~(mask[:-1] & (step[1:] == step[:-1]))
    run = np.cumsum(start) - 1
    run = np.where(mask, run, -1)
    return run, start


def less(
    batch: StepBatch,
    step_adv: np.ndarray,
    tokens: TokenBatch,
    *,
    entropy_quantile: float = 0.8,
    entropy_threshold: float | None = None,
    min_len: int = 3,
    amplify: float = 0.2,
    suppress: float = 0.2,
) -> np.ndarray:
    """LESS: amplify low-entropy segments unique to successes, suppress failures', zero shared."""
    ent = tokens.require("entropy", "less")
    ids = tokens.require("token_id", "less")
    step = tokens.step
    A = np.asarray(step_adv, dtype=np.float64)
    out = A[step].copy()
    if not len(ent):
        return out
    thr = entropy_threshold if entropy_threshold is not None else np.quantile(ent, entropy_quantile)
    run, _ = _runs(ent <= thr, step)
    on = run >= 0
    if not on.any():
        return out
    rid = run[on]
    n_runs = int(rid.max()) + 1
    length = np.bincount(rid, minlength=n_runs)
    # order-sensitive hash of each run's token ids (uint64 arithmetic wraps: a hash, not a sum)
    pos = np.arange(on.sum()) - np.searchsorted(rid, rid)  # position inside the run
    with np.errstate(over="ignore"):
        powers = np.cumprod(np.full(int(pos.max()) + 1, 1_000_003, dtype=np.uint64))
        h = (ids[on].astype(np.uint64) + np.uint64(1)) * powers[pos]
        starts = np.flatnonzero(np.r_[True, rid[1:] != rid[:-1]])
        run_hash = np.add.reduceat(h, starts)
    run_step = step[on][starts]
    good = batch.success[run_step] if batch.success is not None else A[run_step] > 0
    keep = length >= min_len
    gcodes = batch.group_index[run_step]
    key = np.stack([gcodes, run_hash.view(np.int64), length], axis=1)
    _, kid = np.unique(key, axis=0, return_inverse=True)
    kid = kid.reshape(-1)
    in_good = np.bincount(kid, weights=(good & keep).astype(float)) > 0
    in_bad = np.bincount(kid, weights=(~good & keep).astype(float)) > 0
    factor_run = np.ones(n_runs)
    factor_run[in_good[kid] & ~in_bad[kid]] = 1.0 + amplify
    factor_run[in_bad[kid] & ~in_good[kid]] = 1.0 + suppress
    factor_run[in_good[kid] & in_bad[kid]] = 0.0
    factor_run[~keep] = 1.0
    out[on] *= factor_run[rid]
    return out


def _redistribute(
    step_adv: np.ndarray,
    signal: np.ndarray,
    step: np.ndarray,
    tau: float,
    budget: float,
    clip: float,
) -> np.ndarray:
    """A_token = A * ((1 - budget) + budget * n * softmax_step(score / tau)), with the score
    sign(A) * clip(signal, -clip, clip): a token with a higher signal takes a larger share of a
    positive step advantage and a smaller share of a negative one."""
    A = np.asarray(step_adv, dtype=np.float64)
    n = len(A)
    z = np.sign(A)[step] * np.clip(signal, -clip, clip) / tau
    zmax = np.full(n, -np.inf)
    np.maximum.at(zmax, step, z)
    e = np.exp(z - zmax[step])
    tot = np.bincount(step, weights=e, minlength=n)
    cnt = np.bincount(step, minlength=n)
    w = e / tot[step] * cnt[step]
    return A[step] * ((1.0 - budget) + budget * w)


def progress(
    batch: StepBatch,
    step_adv: np.ndarray,
    tokens: TokenBatch,
    *,
    tau: float = 1.0,
    budget: float = 0.5,
    clip: float = 5.0,
) -> np.ndarray:
    """Progress advantage log pi/pi_ref redistributing the step advantage over its tokens."""
    ratio = tokens.require("logprob", "progress") - tokens.require("ref_logprob", "progress")
    return _redistribute(step_adv, ratio, tokens.step, tau, budget, clip)


def stepopsd(
    batch: StepBatch,
    step_adv: np.ndarray,
    tokens: TokenBatch,
    *,
    tau: float = 1.0,
    budget: float = 0.5,
    clip: float = 5.0,
) -> np.ndarray:
    """StepOPSD: hindsight-teacher minus student log-prob gaps redistribute the step advantage."""
    gap = tokens.require("teacher_logprob", "stepopsd") - tokens.require("logprob", "stepopsd")
    return _redistribute(step_adv, gap, tokens.step, tau, budget, clip)


Shaper = Callable[..., np.ndarray]
SHAPERS: dict[str, Shaper] = {
    "ucas": ucas,
    "less": less,
    "progress": progress,
    "stepopsd": stepopsd,
}
_NEEDS: dict[str, frozenset[str]] = {
    "ucas": frozenset({"self_certainty", "token_logit"}),
    "less": frozenset({"entropy", "token_id"}),
    "progress": frozenset({"logprob", "ref_logprob"}),
    "stepopsd": frozenset({"logprob", "teacher_logprob"}),
}


#: Shapers that shape each step from its own tokens' signals only, as ``A * (...)``.
_KEEPS_ZERO = frozenset({"progress", "stepopsd"})


def keeps_zero(name: str) -> bool:
    """Whether shaper ``name`` gives a zero step advantage zero token advantages whatever its
    signals, and reads a step's signals for that step's tokens only: then the signals of steps
    with a zero advantage change nothing (any finite value will do), and a caller may skip
    computing them. Not LESS (a segment's membership compares steps), nor UCAS (it penalises
    zero advantages)."""
    _get(name)
    return name in _KEEPS_ZERO


def available() -> list[str]:
    """Names of the token shapers."""
    return sorted(SHAPERS)


def _get(name: str) -> Shaper:
    try:
        return SHAPERS[name]
    except KeyError:
        raise KeyError(f"unknown token shaper {name!r}; valid: {', '.join(available())}") from None


def needs(name: str) -> frozenset[str]:
    """The per-token signals shaper ``name`` reads (``TokenBatch`` field names)."""
    _get(name)
    return _NEEDS[name]


def options(name: str) -> dict[str, Any]:
    """The shaper's hyper-parameters and their defaults."""
    sig = inspect.signature(_get(name))
    return {p.name: p.default for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY}


def shape(
    batch: StepBatch, step_adv: np.ndarray, tokens: TokenBatch, name: str, **opts: Any
) -> np.ndarray:
    """Token advantages (float32, one per token of ``tokens``) from shaper ``name``."""
    fn = _get(name)
    unknown = sorted(set(opts) - set(options(name)))
    if unknown:
        raise TypeError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for token shaper {name!r}; "
            f"valid: {', '.join(options(name))}"
        )
    A = np.asarray(step_adv, dtype=np.float64)
    if A.shape != (len(batch),):
        raise ValueError(f"step_adv has shape {A.shape}, expected ({len(batch)},) (one per step)")
    if len(tokens.step) and (tokens.step.min() < 0 or tokens.step.max() >= len(batch)):
        raise ValueError(f"TokenBatch.step refers to rows outside 0..{len(batch) - 1}")
    if "budget" in opts and not 0.0 <= opts["budget"] <= 1.0:
        raise ValueError(f"option 'budget' must lie in [0, 1], got {opts['budget']}")
    if "tau" in opts and not opts["tau"] > 0:
        raise ValueError(f"option 'tau' must be > 0, got {opts['tau']}")
    if opts.get("min_len", 1) < 1:
        raise ValueError(f"option 'min_len' must be >= 1, got {opts['min_len']}")
    with np.errstate(over="ignore", invalid="ignore"):
        out = fn(batch, A, tokens, **opts)
    if not np.isfinite(out).all():
        raise FloatingPointError(
            f"token shaper {name!r} produced non-finite advantages; rescale the step advantages"
        )
    return out.astype(np.float32)
