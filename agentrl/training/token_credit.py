"""Token-level credit of an update: token shapers (``credit.token``) on the step advantages.

The recipe's step 4 asks :func:`update_inputs` for the learner's keyword arguments: value
targets, and, with ``credit.token`` set, one advantage per response token from
:func:`agentrl.credit.token_shapers.shape` in place of the broadcast step advantage. The signals a
shaper declares (``token_shapers.needs``) come from the learner's no-grad pass under the policy
that sampled the rollout (entropy, self-certainty, the chosen token's logit), the reference policy
(``ref_logprob``), the rollout itself (``logprob``, ``token_id``), or StepOPSD's hindsight teacher
pass (:func:`hindsight_sequences`: the same model rescoring the step's tokens with the step's
outcome added to its prompt). A credit method's own update inputs (its step hooks,
:mod:`agentrl.methods`) come first; a token shaper reshapes the step advantages only where they
set no token advantages.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import distributed as D
from ..config import TrainConfig
from ..credit import StepBatch, token_shapers
from ..learner import Learner, StepSequence
from ..methods import TrainerHooks
from ..rollout import EpisodeResult

__all__ = ["hindsight_sequences", "shaped_token_advantages", "update_inputs"]

#: StepOPSD's hindsight note (a reconstruction: the paper's exact teacher prompt is not public).
HINDSIGHT = (
    "Hindsight, for judging this step only: after it the environment replied: {next}\n"
    "The episode {outcome} after {steps} steps."
)
NEXT_CHARS = 300  # the next observation is cut to this many characters


def _closing_ids(tokenizer) -> list[int]:
    """Token ids that close the last user message and open the assistant turn (the hindsight note
    goes just before them, i.e. at the end of the last user message)."""
    msgs = [{"role": "user", "content": "\x00"}]
    text = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    tail = text[text.index("\x00") + 1 :]
    return list(tokenizer(tail, add_special_tokens=False)["input_ids"]) if tail else []


def hindsight_sequences(
    tokenizer: Any, episodes: list[EpisodeResult], seqs: list[StepSequence]
) -> list[StepSequence]:
    """Each step's sequence with :data:`HINDSIGHT` (the next observation, the episode's outcome)
    added to the end of its prompt's last user message; same response tokens and constraint."""
    closing = _closing_ids(tokenizer)
    notes = []
    for ep in episodes:
        T = len(ep.steps)
        for t in range(T):
            nxt = ep.steps[t + 1].observation if t + 1 < T else "(the episode ended)"
            outcome = "succeeded" if ep.won else "failed"
            notes.append(HINDSIGHT.format(next=nxt[:NEXT_CHARS], outcome=outcome, steps=T))
    if len(notes) != len(seqs):
        raise ValueError(f"{len(notes)} episode steps for {len(seqs)} sequences")
    out = []
    c = len(closing)
    for s, note in zip(seqs, notes):
        hint = list(tokenizer("\n\n" + note, add_special_tokens=False)["input_ids"])
        p = list(s.prompt_ids)
        teacher = p[:-c] + hint + closing if c and p[-c:] == closing else p + hint
        out.append(StepSequence(teacher, s.response_ids, s.old_logprobs, s.step_row, s.allowed))
    return out


def _fill(seqs: list[StepSequence], keep: list[int], got: list[np.ndarray]) -> list[np.ndarray]:
    """Per sequence, its entry of ``got`` (scored rows ``keep``) or zeros (rows not scored)."""
    out = [np.zeros(len(s.response_ids), np.float32) for s in seqs]
    for j, i in enumerate(keep):
        out[i] = got[j]
    return out


def shaped_token_advantages(
    cfg: TrainConfig,
    learner: Learner,
    tokenizer: Any,
    episodes: list[EpisodeResult],
    batch: StepBatch,
    seqs: list[StepSequence],
    step_adv: np.ndarray,
) -> list[np.ndarray]:
    """Per sequence, its tokens' advantages from shaper ``credit.token`` (float32)."""
    name = cfg.credit.token
    wanted = token_shapers.needs(name)
    passes = wanted & {"ref_logprob", "teacher_logprob"}  # each one more forward pass
    signals = learner.token_signals(seqs, wanted - passes)
    # a shaper that keeps a zero step advantage zero whatever its signals needs these passes only
    # on the other steps (their rows are in each pass's plan; the rest get finite placeholders)
    keep = list(range(len(seqs)))
    if token_shapers.keeps_zero(name):
        keep = [i for i, s in enumerate(seqs) if step_adv[s.step_row] != 0]
    if "ref_logprob" in passes:
        got = learner.token_signals([seqs[i] for i in keep], {"ref_logprob"})["ref_logprob"]
        signals["ref_logprob"] = _fill(seqs, keep, got)
    if "teacher_logprob" in passes:
        teacher = hindsight_sequences(tokenizer, episodes, seqs)
        signals["teacher_logprob"] = _fill(seqs, keep, learner.logprobs([teacher[i] for i in keep]))
    lengths = [len(s.response_ids) for s in seqs]
    step = np.repeat(np.asarray([s.step_row for s in seqs], dtype=np.int64), lengths)
    flat = {
        k: np.concatenate([np.asarray(a, dtype=np.float64) for a in v]) for k, v in signals.items()
    }
    if "token_id" in flat:
        flat["token_id"] = flat["token_id"].astype(np.int64)
    # torchrun: a shaper may compare a step's tokens with other steps' (LESS's segments, the
    # batch-wide statistics of some shapers), so every rank shapes the whole batch's tokens, in
    # global row order (ranks hold contiguous blocks of groups), and keeps its own slice
    parts = D.all_gather_objects((step, flat))
    first = sum(len(p[0]) for p in parts[: D.rank()])
    if len(parts) > 1:
        step = np.concatenate([p[0] for p in parts])
        flat = {k: np.concatenate([p[1][k] for p in parts]) for k in flat}
    tokens = token_shapers.TokenBatch(step=step, **flat)
    shaped = token_shapers.shape(batch, step_adv, tokens, name, **cfg.credit.token_options)
    shaped = shaped[first : first + sum(lengths)]
    return np.split(shaped, np.cumsum(lengths)[:-1])


def update_inputs(
    cfg: TrainConfig,
    learner: Learner,
    tokenizer: Any,
    episodes: list[EpisodeResult],
    batch: StepBatch,
    seqs: list[StepSequence],
    res: Any,
    hooks: TrainerHooks,
    prepared: Any = None,
) -> tuple[dict[str, Any], dict[str, float]]:
    """The learner's keyword arguments for this update (value targets, token advantages) and the
    metrics of the token-level credit. ``hooks``: the run's trainer hooks, whose step hooks add
    their update inputs (from ``prepared``, what their preparation returned)."""
    values = batch.value
    returns = res.components.get("returns") if values is not None else None
    if values is not None and returns is None:
        returns = res.advantages.astype(np.float64) + values
    kw: dict[str, Any] = {"returns": returns, "old_values": values}
    metrics: dict[str, float] = {}
    if hooks.steps is not None:
        extra, own = hooks.steps.update_inputs(res, prepared, batch, seqs)
        kw.update(extra)
        metrics.update(own)
    if cfg.credit.token is not None and "token_advantages" not in kw:
        tok = shaped_token_advantages(
            cfg, learner, tokenizer, episodes, batch, seqs, res.advantages
        )
        kw["token_advantages"] = tok
        flat = np.concatenate(tok) if tok else np.zeros(0)
        base = np.repeat(res.advantages[[s.step_row for s in seqs]], [len(t) for t in tok])
        local = {
            "credit/token_advantage_abs_mean": float(np.abs(flat).mean()) if len(flat) else 0.0,
            "credit/token_sign_flips": (
                float(np.mean(np.sign(flat) * np.sign(base) < 0)) if len(flat) else 0.0
            ),
        }
        metrics.update(D.reduce_metrics(local, weight=len(flat)))  # torchrun: over all ranks
    return kw, metrics
