"""The trainer's trajectory traces (``trainer.traces``): a few task groups of some iterations, with
the credit module's advantages and groups and the loss's per-token values, and the first held-out
tasks of every evaluation, under ``<run>/traces/`` (format: :mod:`agentrl.evaluation.traces`).

Traced iterations: the first, every ``every``-th after it and the last; in each, the first
``groups`` task groups (every rollout of them, so a step's whole GiGPO anchor group is in the
trace). The learner keeps the per-token loss values of the traced rows only
(:class:`~agentrl.learner.capture.TokenCapture`); decoding their texts and writing the file is
the rest of the cost (``scripts/bench_traces.py`` measures it). Each finished file also goes to
the trackers that take traces (a W&B table, an MLflow artifact).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import credit
from ..config import TrainConfig
from ..episodes import AGENT_STRIDE, EpisodeResult, agent_views
from ..evaluation.traces import TraceFile, episode_line, plain, step_line
from ..learner.capture import TokenCapture
from ..learner.sequences import StepSequence

__all__ = ["Tracer", "traced_iteration"]


def traced_iteration(it: int, every: int, iterations: int) -> bool:
    """Whether iteration index ``it`` (0-based) is traced: the first, every ``every``-th after
    it and the last (``every`` 0: none)."""
    return every > 0 and (it % every == 0 or it == iterations - 1)


class Tracer:
    """Writes a run's traces; the recipe calls :meth:`before_update`, :meth:`after_update` and
    :meth:`evaluation`. Only rank 0 makes one (its own rows under ``torchrun``)."""

    def __init__(self, cfg: TrainConfig, out: Path, tokenizer: Any, trackers: Sequence[Any] = ()):
        self.cfg = cfg
        self.tc = cfg.trainer.traces
        self.folder = out / "traces"
        self.tok = tokenizer
        self.trackers = [t for t in trackers if hasattr(t, "log_traces")]
        self._pending: dict[str, Any] | None = None

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=False)

    def _meta(self, **kw: Any) -> dict[str, Any]:
        c = self.cfg
        return {
            "env": c.env.id,
            "credit": c.credit.name,
            "credit_options": dict(c.credit.options),
            "model": c.model.name,
            "seed": c.seed,
            **kw,
        }

    # -- training --------------------------------------------------------------------------------
    def before_update(
        self,
        it: int,
        eps: Sequence[EpisodeResult],
        batch: credit.StepBatch,
        seqs: Sequence[StepSequence],
        res: credit.CreditResult,
        learner: Any,
        options: dict[str, Any],
    ) -> None:
        """On a traced iteration: choose the rows, ask the learner to keep their token values."""
        self._pending = None
        learner.capture = None  # (an update abandoned before its file was written)
        if not traced_iteration(it, self.tc.every, self.cfg.trainer.iterations) or not eps:
            return
        chosen = list(dict.fromkeys(ep.group for ep in eps))[: self.tc.groups]
        keep = {id(s) for ep in eps if ep.group in chosen for s in ep.steps}
        # the rows of this process, in the step batch's order (agent_views, as to_step_batch)
        views = agent_views(eps)
        rows: list[tuple[EpisodeResult, int, Any, int]] = []
        k = 0
        for ep in views:
            for t, s in enumerate(ep.steps):
                if id(s) in keep:
                    rows.append((ep, t, s, k))
                k += 1
        if not rows:
            return
        try:
            groups = credit.step_groups(batch, self.cfg.credit.name, **options)
        except Exception as exc:  # noqa: BLE001 - a trace must never stop training
            groups = {}
            print(f"warning: traces: the credit groups could not be recomputed: {exc}",
                  file=sys.stderr)  # fmt: skip
        traced = [seqs[k].step_row for *_, k in rows]
        learner.capture = TokenCapture(traced, learner.cfg.clip_low, learner.cfg.clip_high)
        # the weights that sampled the rows: the learner's now, unless rollouts run ahead
        # (rollout.staleness >= 1 records each token's version in the sequences)
        version = None if self.cfg.rollout.staleness else int(learner.updates)
        self._pending = {"it": it, "rows": rows, "groups": groups, "res": res, "seqs": seqs,
                         "learner": learner, "version": version}  # fmt: skip

    def after_update(self, kw: dict[str, Any] | None = None) -> Path | None:
        """Write the traced iteration's file (the learner's capture is then dropped)."""
        p, self._pending = self._pending, None
        if p is None:
            return None
        learner = p["learner"]
        capture: TokenCapture = learner.capture
        learner.capture = None
        token_adv = (kw or {}).get("token_advantages")
        res, seqs, groups = p["res"], p["seqs"], p["groups"]
        meta = self._meta(kind="train", iteration=p["it"] + 1, phase="train",
                          groups=self.tc.groups)  # fmt: skip
        by_traj: dict[int, tuple[EpisodeResult, list[dict[str, Any]]]] = {}
        for ep, t, s, k in p["rows"]:
            row = seqs[k].step_row
            line = step_line(s, t, decode=self.decode, max_chars=self.tc.max_chars)
            line["row"] = int(row)
            line["advantage"] = plain(float(res.advantages[row]))
            line["credit"] = {name: plain(v[row]) for name, v in groups.items()}
            for name, comp in res.components.items():
                line["credit"][f"component_{name}"] = plain(float(np.asarray(comp)[row]))
            tokens = line.get("tokens")
            if tokens is not None:
                n = len(s.response_ids)
                got = capture.got.get(int(row)) if capture is not None else None
                if got is not None:
                    for key in ("advantage", "learner_logprob", "old_logprob", "ratio", "clipped",
                                "in_loss"):  # fmt: skip
                        tokens[key] = plain(got[key][:n])
                else:  # not in a forward pass (a zero advantage the learner skipped)
                    adv = token_adv[k] if token_adv is not None else [res.advantages[row]] * n
                    tokens["advantage"] = plain(list(np.asarray(adv, dtype=np.float64)))
                    for key in ("learner_logprob", "old_logprob", "ratio", "clipped", "in_loss"):
                        tokens[key] = None
                if p["version"] is not None:
                    tokens["version"] = [p["version"]] * n
                elif seqs[k].versions is not None:
                    tokens["version"] = [int(v) for v in seqs[k].versions]
            by_traj.setdefault(ep.traj, (ep, []))[1].append(line)
        lines = []
        for ep, steps in by_traj.values():
            line = episode_line(ep, self.cfg.env.id, steps=steps)
            if ep.agent is not None:  # one agent's view: the game it is a part of
                line["game"] = ep.traj // AGENT_STRIDE
            lines.append(line)
        return self._write(f"train_{p['it'] + 1:06d}", meta, lines, p["it"] + 1)

    # -- evaluation ------------------------------------------------------------------------------
    def evaluation(self, label: str, iteration: int, eps: Sequence[EpisodeResult]) -> Path | None:
        """The first ``eval_episodes`` held-out episodes of an evaluation (the fixed task order)."""
        n = self.tc.eval_episodes
        if n <= 0 or not eps:
            return None
        meta = self._meta(kind="eval", iteration=iteration, phase=label,
                          greedy=self.cfg.rollout.eval_temperature == 0)  # fmt: skip
        lines = [
            episode_line(ep, self.cfg.env.id, decode=self.decode, max_chars=self.tc.max_chars)
            for ep in list(eps)[:n]
        ]
        return self._write(f"eval_{label}", meta, lines, iteration)

    def _write(self, name: str, meta: dict[str, Any], lines: list, step: int) -> Path | None:
        """The file, then the trackers; a file that cannot be written (a full disk, a read-only
        folder) is a warning, never the end of the run."""
        try:
            with TraceFile(self.folder, name, meta, self.tc.gzip) as f:
                for line in lines:
                    f.write(line)
        except OSError as exc:
            print(f"warning: traces: {name} not written: {exc}", file=sys.stderr)
            return None
        self._to_trackers(f.path, step)
        return f.path

    def _to_trackers(self, path: Path, step: int) -> None:
        for tr in self.trackers:
            try:
                tr.log_traces(path, step)
            except Exception as exc:  # noqa: BLE001 - a tracker must not stop training
                print(f"warning: {type(tr).__name__} could not take {path.name}: {exc}",
                      file=sys.stderr)  # fmt: skip
